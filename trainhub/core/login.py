"""The log-in page, rate-limited: after TRAINHUB_LOGIN_MAX_FAILURES failed attempts for one
username from one address (an IPv6 address's /64) within TRAINHUB_LOGIN_WINDOW_SECONDS, or
TRAINHUB_LOGIN_MAX_ACCOUNT_FAILURES for one username from anywhere, every attempt (right password
or not) is answered 429 until the window has passed. Counters live in the default cache. The
address is the client's, read through TRAINHUB_TRUSTED_PROXIES (trainhub/core/clientip.py)."""
from __future__ import annotations

import hashlib
import ipaddress
import math
import time

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.http import HttpResponseRedirect
from django.urls import reverse

from trainhub.core.clientip import request_client_address


def _keys(request) -> list[tuple[str, int]]:
    """The counters an attempt counts against, with their limits: this username from this network
    (an IPv6 client's whole /64, which one host can hop across), and this username from anywhere
    (many addresses guessing one account)."""
    username = request.POST.get("username", "")[:150].strip().lower()
    network = _network(request_client_address(request))
    return [("login-failures:" + hashlib.sha256(f"{username}\0{network}".encode()).hexdigest(),
             settings.TRAINHUB_LOGIN_MAX_FAILURES),
            ("login-failures-account:" + hashlib.sha256(username.encode()).hexdigest(),
             settings.TRAINHUB_LOGIN_MAX_ACCOUNT_FAILURES)]


def _network(address: str) -> str:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:  # a unix socket has no address: every client shares one counter
        return address
    return str(ipaddress.ip_network(f"{ip}/64", strict=False)) if ip.version == 6 else str(ip)


def _seconds_left(keys: list[tuple[str, int]]) -> int:
    """Seconds until these counters may try again; 0 when none is locked."""
    most = 0
    for key, limit in keys:
        count, start = cache.get(key, (0, 0.0))
        left = settings.TRAINHUB_LOGIN_WINDOW_SECONDS - (time.time() - start)
        if count >= limit and left > 0:
            most = max(most, math.ceil(left))
    return most


def _record_failures(keys: list[tuple[str, int]]) -> None:
    for key, _limit in keys:
        _record_failure(key)


def _record_failure(key: str) -> None:
    # A fixed window from the first failure; a lost update between two processes at worst
    # lets one extra attempt through.
    window = settings.TRAINHUB_LOGIN_WINDOW_SECONDS
    now = time.time()
    count, start = cache.get(key, (0, now))
    if now - start >= window:
        count, start = 0, now
    cache.set(key, (count + 1, start), timeout=max(1, math.ceil(window - (now - start))))


class LoginView(auth_views.LoginView):
    def post(self, request, *args, **kwargs):
        left = _seconds_left(_keys(request))
        if left:
            minutes = math.ceil(left / 60)
            message = (f"Too many failed log-ins for this username. "
                       f"Try again in {minutes} minute{'s' if minutes != 1 else ''}, or ask an administrator "
                       f"to reset your password.")
            form = self.get_form_class()(request, initial={"username": request.POST.get("username", "")[:150]})
            form.cleaned_data = {}  # unbound: nothing to clean, but add_error expects it
            form.add_error(None, message)  # the admin's log-in template shows non-field errors
            context = self.get_context_data(form=form, locked_message=message)
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(left)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        _record_failures(_keys(self.request))
        return super().form_invalid(form)

    def form_valid(self, form):
        cache.delete_many([key for key, _limit in _keys(self.request)])
        return super().form_valid(form)


def admin_login(request):
    """The admin's own log-in page (its template and "not authorized" note), rate-limited alike.
    Mirrors ``AdminSite.login``, which cannot be given another view class."""
    site = admin.site
    if request.method == "GET" and site.has_permission(request):
        return HttpResponseRedirect(reverse("admin:index", current_app=site.name))
    context = {**site.each_context(request), "title": "Log in", "subtitle": None,
               "app_path": request.get_full_path(), "username": request.user.get_username()}
    if REDIRECT_FIELD_NAME not in request.GET and REDIRECT_FIELD_NAME not in request.POST:
        context[REDIRECT_FIELD_NAME] = reverse("admin:index", current_app=site.name)
    request.current_app = site.name
    return LoginView.as_view(extra_context=context, authentication_form=AdminAuthenticationForm,
                             template_name="admin/login.html")(request)
