"""Who wants to hear about finished jobs, and what was sent to them."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from trainhub.jobs.models import Job

EVENTS = ("succeeded", "failed", "cancelled")


def _default_events() -> list[str]:
    return ["succeeded", "failed"]


class NotifySettings(models.Model):
    """A user's defaults; a job's spec ``notify`` section overrides them field by field."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notify_settings")
    webhook_url = models.URLField(max_length=2000, blank=True)
    email = models.BooleanField(default=False, help_text="e-mail me when a job ends")
    events = models.JSONField(default=_default_events, help_text="final statuses to notify about")

    def __str__(self) -> str:
        return f"notifications of {self.user}"


class NotificationDelivery(models.Model):
    """One message to one target: an outbox row, written in the transaction of the final status
    and delivered (with retries) by the delivery pool of any TrainHub process (``notify/pool.py``)."""

    class Channel(models.TextChoices):
        WEBHOOK = "webhook"
        EMAIL = "email"

    class State(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"
        REFUSED = "refused", "refused (address not allowed)"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="notifications")
    channel = models.CharField(max_length=10, choices=Channel.choices)
    target = models.CharField(max_length=2000)
    event = models.CharField(max_length=12)
    status = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    payload = models.JSONField(default=dict, help_text="what is sent, fixed when the final status committed")
    next_attempt_at = models.DateTimeField(default=timezone.now, help_text="when the next try is due")
    claimed_until = models.DateTimeField(null=True, blank=True,
                                         help_text="a delivering process holds it until then; after, anyone may")
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    result = models.CharField(max_length=200, blank=True,
                              help_text="what the owner sees: delivered / failed (HTTP status) / refused")
    last_error = models.TextField(blank=True, help_text="details for administrators only")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "notification deliveries"
        indexes = [models.Index(fields=["status", "channel", "next_attempt_at"], name="notify_due")]

    def __str__(self) -> str:
        return f"{self.channel} for job {self.job_id}: {self.status}"
