"""The log-in page, rate-limited: after TRAINHUB_LOGIN_MAX_FAILURES failed attempts for one
username from one address within TRAINHUB_LOGIN_WINDOW_SECONDS, every attempt (right password
or not) is answered 429 until the window has passed. Counters live in the default cache. The
address is the client's, read through TRAINHUB_TRUSTED_PROXIES (trainhub/core/clientip.py)."""
from __future__ import annotations

import hashlib
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


def _key(request) -> str:
    username = request.POST.get("username", "")[:150].strip().lower()
    address = request_client_address(request)
    return "login-failures:" + hashlib.sha256(f"{username}\0{address}".encode()).hexdigest()


def _seconds_left(key: str) -> int:
    """Seconds until this key may try again; 0 when it is not locked."""
    count, start = cache.get(key, (0, 0.0))
    left = settings.TRAINHUB_LOGIN_WINDOW_SECONDS - (time.time() - start)
    return math.ceil(left) if count >= settings.TRAINHUB_LOGIN_MAX_FAILURES and left > 0 else 0


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
        left = _seconds_left(_key(request))
        if left:
            minutes = math.ceil(left / 60)
            message = (f"Too many failed log-ins for this username from your address. "
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
        _record_failure(_key(self.request))
        return super().form_invalid(form)

    def form_valid(self, form):
        cache.delete(_key(self.request))
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
