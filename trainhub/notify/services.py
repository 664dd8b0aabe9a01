"""Tell people a job ended: a webhook (JSON) and an e-mail to the owner, through the outbox.

``on_job_finishing`` runs inside the transaction of a final status (the model's
``job_finishing`` signal) and writes one ``NotificationDelivery`` row per target, with the
payload; ``on_job_finished`` runs once that commits and wakes this process's delivery pool
(``pool.py``), which sends, retries with backoff and records (``outbox.py``). The job never
waits for, and never fails because of, a receiver.
"""
from __future__ import annotations

import logging
import time

from django.db import transaction

from trainhub.jobs.models import FINAL, Job
from trainhub.notify.models import NotificationDelivery, NotifySettings
from trainhub.notify.outbox import payload
from trainhub.notify.pool import POOL
from workers.runner.config import Notify, SpecError

log = logging.getLogger(__name__)
Delivery = NotificationDelivery


def _notify_section(job: Job) -> Notify:
    try:
        return job.spec_model.notify or Notify()
    except SpecError:  # a stored spec that no longer validates: the owner's settings still apply
        return Notify()


def plan(job: Job) -> list[tuple[str, str]]:
    """(channel, target) pairs this job's final status goes to: the owner's settings, overridden
    field by field by the spec's ``notify`` section."""
    mine = NotifySettings.objects.filter(user_id=job.owner_id).first() or NotifySettings()
    override = _notify_section(job)
    events = override.on if override.on is not None else mine.events
    if job.status not in events:
        return []
    webhook = override.webhook if override.webhook is not None else mine.webhook_url
    email = override.email if override.email is not None else mine.email
    targets = [(Delivery.Channel.WEBHOOK, webhook.strip())] if webhook and webhook.strip() else []
    if email:
        targets.append((Delivery.Channel.EMAIL, job.owner.email))
    return targets


def enqueue(job_id: int) -> list[Delivery]:
    """Write the outbox rows for a job that reached a final status (in the caller's transaction)."""
    job = Job.objects.select_related("owner", "pool").get(pk=job_id)
    if job.status not in FINAL:
        return []
    body = payload(job)
    return [Delivery.objects.create(job=job, channel=channel, target=target, event=job.status, payload=body)
            for channel, target in plan(job)]


def on_job_finishing(sender, job_id: int, **_) -> None:
    """Receiver of ``trainhub.jobs.signals.job_finishing``, inside the final status's transaction."""
    try:
        with transaction.atomic():  # a savepoint: a notification problem never rolls back the status
            enqueue(job_id)
    except Exception:
        log.exception("notifications for job %s could not be recorded", job_id)


def on_job_finished(sender, job: Job, **_) -> None:
    """Receiver of ``trainhub.jobs.signals.job_finished`` (the status and its rows committed)."""
    if Delivery.objects.filter(job_id=job.pk, status=Delivery.State.PENDING).exists():
        POOL.wake()


def wait_idle(timeout: float = 60) -> bool:
    """Wait until no delivery is pending or in flight (tests, graceful shutdown); False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not POOL.busy and not Delivery.objects.filter(status=Delivery.State.PENDING).exists():
            return True
        time.sleep(0.02)
    return False
