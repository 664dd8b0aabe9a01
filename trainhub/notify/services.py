"""Tell people a job ended: a webhook (JSON, retried with backoff) and an e-mail to the owner.

``job_finished`` runs once per final status, after it commits: the model's ``job_finished``
signal calls it (see ``NotifyConfig.ready``). Delivery runs in a daemon
thread so the worker never waits on a slow or dead receiver, and a failure is only recorded
on the ``NotificationDelivery`` row: it never changes the job.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request

from django.conf import settings
from django.core.mail import send_mail
from django.db import close_old_connections, connection
from django.urls import reverse
from django.utils import timezone

from trainhub.jobs.models import FINAL, Job
from trainhub.notify.models import NotificationDelivery, NotifySettings
from workers.runner.config import Notify, SpecError

log = logging.getLogger(__name__)
Delivery = NotificationDelivery
_threads: list[threading.Thread] = []


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


def payload(job: Job) -> dict:
    base = getattr(settings, "TRAINHUB_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
    return {"event": f"job.{job.status}", "id": job.pk, "name": job.name, "status": job.status,
            "owner": job.owner.username, "pool": job.pool.name, "attempt": job.attempt,
            "exit_code": job.exit_code, "error": job.error,
            "started_at": job.started_at.isoformat() if job.started_at else None,
            "finished_at": job.finished_at.isoformat() if job.finished_at else None,
            "url": base + reverse("job_detail", args=[job.pk])}


def job_finished(job_id: int) -> threading.Thread | None:
    """Record and start the deliveries for a job that reached a final status. Never raises."""
    try:
        job = Job.objects.select_related("owner", "pool").get(pk=job_id)
        if job.status not in FINAL:
            return None
        rows = [Delivery.objects.create(job=job, channel=ch, target=target, event=job.status)
                for ch, target in plan(job)]
        if not rows:
            return None
        thread = threading.Thread(target=_deliver_all, args=([r.pk for r in rows], payload(job)),
                                  name=f"notify-job-{job.pk}", daemon=True)
        _threads[:] = [t for t in _threads if t.is_alive()] + [thread]
        thread.start()
        return thread
    except Exception:  # a notification problem must never fail the job's own bookkeeping
        log.exception("notifications for job %s could not be started", job_id)
        return None


def on_job_finished(sender, job: Job, **_) -> None:
    """Receiver of ``trainhub.jobs.signals.job_finished`` (sent after the final status commits),
    connected in ``NotifyConfig.ready``."""
    job_finished(job.pk)


def wait_idle(timeout: float = 60) -> None:
    """Wait for deliveries in flight (tests, graceful shutdown)."""
    deadline = time.monotonic() + timeout
    for thread in list(_threads):
        thread.join(max(0.0, deadline - time.monotonic()))


def _deliver_all(ids: list[int], body: dict) -> None:
    try:
        for delivery in Delivery.objects.filter(pk__in=ids).select_related("job__owner"):
            _deliver(delivery, body)
    except Exception:
        log.exception("notification delivery crashed")
    finally:
        connection.close()  # this thread's own connection


def _deliver(delivery: Delivery, body: dict) -> None:
    tries = getattr(settings, "TRAINHUB_NOTIFY_TRIES", 5)
    backoff = getattr(settings, "TRAINHUB_NOTIFY_BACKOFF_SECONDS", 1.0)
    send = _post if delivery.channel == Delivery.Channel.WEBHOOK else _email
    for attempt in range(1, tries + 1):
        try:
            send(delivery, body)
            error, retry = "", False
        except _Permanent as exc:
            error, retry = str(exc), False
        except Exception as exc:
            error, retry = f"{type(exc).__name__}: {exc}", True
        done = not error or not retry or attempt == tries
        status = Delivery.State.SENT if not error else (Delivery.State.FAILED if done else Delivery.State.PENDING)
        close_old_connections()
        Delivery.objects.filter(pk=delivery.pk).update(attempts=attempt, status=status, last_error=error[:2000],
                                                     updated_at=timezone.now())
        if done:
            if error:
                log.warning("%s for job %s to %s failed after %d attempt(s): %s", delivery.channel,
                            delivery.job_id, delivery.target, attempt, error)
            return
        time.sleep(backoff * 2 ** (attempt - 1))  # 1, 2, 4, 8 s by default


class _Permanent(Exception):
    """A failure that retrying cannot fix (a 4xx answer, no address to write to)."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # a redirect is reported as the 3xx it is, never followed elsewhere


_opener = urllib.request.build_opener(_NoRedirect)


def _post(delivery: Delivery, body: dict) -> None:
    request = urllib.request.Request(delivery.target, data=json.dumps(body).encode(), method="POST", headers={
        "Content-Type": "application/json", "User-Agent": "TrainHub-Webhook/1",
        "X-TrainHub-Event": body["event"], "X-TrainHub-Delivery": str(delivery.pk)})
    try:
        with _opener.open(request, timeout=getattr(settings, "TRAINHUB_NOTIFY_TIMEOUT_SECONDS", 10)) as response:
            response.read(65536)
    except urllib.error.HTTPError as exc:
        if 400 <= exc.code < 500 and exc.code not in (408, 425, 429):
            raise _Permanent(f"HTTP {exc.code} {exc.reason}; check the webhook URL") from None
        raise RuntimeError(f"HTTP {exc.code} {exc.reason}") from None


def _email(delivery: Delivery, body: dict) -> None:
    if not delivery.target:
        raise _Permanent("the account has no e-mail address; add one on the notifications page")
    subject = f"[TrainHub] job #{body['id']} {body['name']} {body['status']}"
    lines = [f"Job #{body['id']} {body['name']} {body['status']} (attempt {body['attempt']}, pool {body['pool']})."]
    if body["exit_code"] is not None:
        lines.append(f"Exit code: {body['exit_code']}")
    if body["error"]:
        lines.append(f"Error: {body['error']}")
    lines += [f"Started {body['started_at'] or '-'}, finished {body['finished_at'] or '-'}.", "", body["url"]]
    send_mail(subject, "\n".join(lines), None, [delivery.target])
