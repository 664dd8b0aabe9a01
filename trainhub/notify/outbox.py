"""The outbox: a ``NotificationDelivery`` row per message, claimed, tried and recorded.

Rows are written in the transaction of the final status (``services.on_job_finishing``), so a
committed status always has its deliveries and a rolled-back one has none. Any process's
delivery pool claims a due row with a compare-and-set on ``claimed_until`` (a lease), so two
processes never try the same row at once, and a row whose process died mid-try is taken up again
once its lease runs out. A try counts when it is claimed. Delivery is **at least once**: a
process killed after the receiver answered but before the answer was recorded leaves the row to
be sent again, with the same ``X-TrainHub-Delivery`` id (``delivery_id`` in the body) for the
receiver to drop the duplicate.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Min, Q
from django.urls import reverse
from django.utils import timezone

from trainhub.jobs.models import Job
from trainhub.notify import channels
from trainhub.notify.models import NotificationDelivery as Delivery

log = logging.getLogger(__name__)
#: due rows looked at per claim; more than one so that losing a race to another process is cheap
CANDIDATES = 8


def tries() -> int:
    return getattr(settings, "TRAINHUB_NOTIFY_TRIES", 5)


def backoff(attempt: int) -> float:
    """Seconds to wait after failed try ``attempt``: 1, 2, 4, 8 … times the base, at most an hour."""
    return min(3600.0, getattr(settings, "TRAINHUB_NOTIFY_BACKOFF_SECONDS", 1.0) * 2 ** (attempt - 1))


def _lease() -> timedelta:
    return timedelta(seconds=getattr(settings, "TRAINHUB_NOTIFY_CLAIM_SECONDS", 120))


def _unclaimed(now: datetime) -> Q:
    return Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)


def claim(channel: str) -> Delivery | None:
    """Take one due row of ``channel`` for this process, or None when none is due."""
    now = timezone.now()
    for candidate in due(channel, now):
        delivery = take(*candidate, now)
        if delivery is not None:
            return delivery
    return None


def due(channel: str, now: datetime) -> list[tuple[int, datetime | None, int]]:
    """Up to ``CANDIDATES`` rows of ``channel`` due at ``now``: (pk, claimed_until, attempts) each."""
    return list(Delivery.objects.filter(_unclaimed(now), channel=channel, status=Delivery.State.PENDING,
                                        next_attempt_at__lte=now)
                .order_by("next_attempt_at", "id").values_list("pk", "claimed_until", "attempts")[:CANDIDATES])


def take(pk: int, held: datetime | None, attempts: int, now: datetime) -> Delivery | None:
    """Claim a row read by ``due`` if no one has claimed it since. ``attempts`` is part of the
    compare-and-set: it goes up with every claim, so a row another thread tried and released (its
    ``claimed_until`` back to NULL, the next try due only after the backoff) between this thread's
    read and its update is not taken again at once."""
    same = Q(claimed_until__isnull=True) if held is None else Q(claimed_until=held)
    mine = Delivery.objects.filter(same, pk=pk, attempts=attempts, status=Delivery.State.PENDING)
    if attempts >= tries():  # its last try was under way when the process making it stopped
        mine.update(status=Delivery.State.FAILED, claimed_until=None, updated_at=now,
                    result="failed (the last try was cut off; it may have arrived)",
                    last_error="the process making the last try stopped before recording its answer")
        return None
    if mine.update(claimed_until=now + _lease(), attempts=F("attempts") + 1, updated_at=now):
        return Delivery.objects.select_related("job__owner", "job__pool").get(pk=pk)
    return None


def seconds_to_next(channel: str, cap: float) -> float:
    """How long until a row of ``channel`` is due (``cap`` at most; rows others hold are found
    by the next poll after their lease ends)."""
    now = timezone.now()
    first = (Delivery.objects.filter(_unclaimed(now), channel=channel, status=Delivery.State.PENDING)
             .aggregate(at=Min("next_attempt_at"))["at"])
    if first is None:
        return cap
    return max(0.0, min(cap, (first - now).total_seconds()))


def payload(job: Job) -> dict:
    """What a webhook receives (and an e-mail says), fixed when the final status commits."""
    base = getattr(settings, "TRAINHUB_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
    return {"event": f"job.{job.status}", "id": job.pk, "name": job.name, "status": job.status,
            "owner": job.owner.username, "pool": job.pool.name, "attempt": job.attempt,
            "exit_code": job.exit_code, "error": job.error,
            "started_at": job.started_at.isoformat() if job.started_at else None,
            "finished_at": job.finished_at.isoformat() if job.finished_at else None,
            "url": base + reverse("job_detail", args=[job.pk])}


def send(delivery: Delivery) -> channels.Result:
    # rows written before the payload was stored get it now; delivery_id is the idempotency key
    body = {**(delivery.payload or payload(delivery.job)), "delivery_id": delivery.pk}
    if delivery.channel == Delivery.Channel.WEBHOOK:
        return channels.post_webhook(delivery.target, body, delivery.pk)
    return channels.send_email(delivery.target, body)


def record(delivery: Delivery, outcome: channels.Result) -> str:
    """Store a try's outcome; returns the row's new status."""
    now = timezone.now()
    fields = {"http_status": outcome.http_status, "result": outcome.result[:200], "last_error": outcome.detail[:2000],
              "claimed_until": None, "updated_at": now}
    if outcome.ok:
        status = Delivery.State.SENT
    elif outcome.refused:
        status = Delivery.State.REFUSED
    elif outcome.retry and delivery.attempts < tries():
        status = Delivery.State.PENDING
        fields["next_attempt_at"] = now + timedelta(seconds=backoff(delivery.attempts))
        fields["result"] = f"{outcome.result}; trying again ({delivery.attempts} of {tries()} tries made)"[:200]
    else:
        status = Delivery.State.FAILED
    won = Delivery.objects.filter(pk=delivery.pk, claimed_until=delivery.claimed_until).update(status=status, **fields)
    if not won:  # our lease ran out and another process took the row: its record wins
        log.warning("delivery %s: the answer came after its lease ended; not recorded", delivery.pk)
    elif status in (Delivery.State.FAILED, Delivery.State.REFUSED):
        log.warning("%s for job %s to %s %s after %d try(s): %s", delivery.channel, delivery.job_id,
                    delivery.target, status, delivery.attempts, outcome.detail)
    return status
