"""The notifications page: your webhook, e-mail and events, and what was sent lately."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from trainhub.notify.forms import NotifySettingsForm
from trainhub.notify.models import NotificationDelivery, NotifySettings

RECENT = 20


@login_required
@require_http_methods(["GET", "POST"])
def notify_settings(request: HttpRequest) -> HttpResponse:
    mine = NotifySettings.objects.filter(user=request.user).first() or NotifySettings(user=request.user)
    initial = {"address": request.user.email, "webhook_url": mine.webhook_url, "email": mine.email,
               "events": mine.events}
    form = NotifySettingsForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        mine.webhook_url, mine.email, mine.events = data["webhook_url"], data["email"], data["events"]
        mine.save()
        if data["address"] != request.user.email:
            request.user.email = data["address"]
            request.user.save(update_fields=["email"])
        messages.info(request, "Notification settings saved.")
        return redirect("notify_settings")
    deliveries = (NotificationDelivery.objects.filter(job__owner=request.user).select_related("job")[:RECENT])
    return render(request, "notify/settings.html", {"form": form, "deliveries": deliveries},
                  status=422 if form.errors else 200)
