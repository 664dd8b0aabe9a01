"""What a worker does to a job: claim it, keep its lease, and record how it ended.

Every write after the claim is fenced by ``lease_token``: a worker that lost its job
(lease expired, job handed to another worker) can never write as the owner again.
"""
from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from trainhub.jobs.models import Job, Status
from trainhub.jobs import services as job_services  # by module: tests replace job_enqueue there
from trainhub.pools.models import Worker
from trainhub.runs import slurm_adopt
from trainhub.runs.models import GpuLease
from workers.runner.errors import SpecError


log = logging.getLogger(__name__)
#: how long a final write keeps retrying through a database outage
DB_RETRY_SECONDS = 60.0


#: what a database that is briefly unavailable raises
DB_ERRORS = (OperationalError, InterfaceError)


def drop_connection() -> None:
    """Discard this thread's database connection after an outage error; the next query reconnects."""
    try:
        connection.close()
    except Exception:  # a broken connection may fail to close; it is discarded either way
        pass


def retry_db(fn):
    """Retry ``fn`` with backoff while the database is unavailable (up to ``DB_RETRY_SECONDS``).

    Safe for the writes here: each is a compare-and-set, so a retry after a write that did
    commit finds the row already moved and does nothing.
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        deadline, delay = time.monotonic() + DB_RETRY_SECONDS, 0.1
        while True:
            try:
                return fn(*args, **kwargs)
            except DB_ERRORS as exc:
                # in_atomic_block, not get_autocommit(): that reconnects, and raises while the database is down
                if time.monotonic() + delay > deadline or connection.in_atomic_block:
                    raise  # out of time, or inside a caller's transaction, which must roll back first
                log.warning("%s: database unavailable (%s); retrying in %.1f s", fn.__name__, exc, delay)
                drop_connection()
                time.sleep(delay)
                delay = min(5.0, delay * 2)
    return wrapper


@dataclass
class Outcome:
    status: str  # succeeded | failed | cancelled | queued (interrupted through no fault of the job)
    exit_code: int | None
    reason: str


def _lease_until():
    return timezone.now() + timedelta(seconds=settings.TRAINHUB_LEASE_SECONDS)


def job_claim(job_id: int, attempt: int, *, hostname: str, task_id: str = "", gpus=(), job: Job | None = None,
              worker: Worker | None = None) -> Job | None:
    """Compare-and-set ``queued -> running`` for this attempt, taking the GPU indices ``gpus``
    of this worker in the same transaction; None if someone else has the job or a GPU.

    ``job`` and ``worker``: rows the caller has just read (the claim's candidates), so the claim
    reads nothing again; the compare-and-set names the attempt either way."""
    if job is None:
        job = Job.objects.select_related("pool").filter(pk=job_id).first()
    if job is None or job.status != Status.QUEUED or job.attempt != attempt:
        return None
    if worker is None:
        worker = Worker.objects.filter(hostname=hostname).first()
    if gpus and worker is None:
        return None
    token = job.lease_token + 1
    reason = f"claimed by {hostname}" + (f" with GPU(s) {','.join(map(str, gpus))}" if gpus else "")
    def running() -> bool:
        return job.transition(Status.RUNNING, reason=reason, only_if={"attempt": attempt}, lease_token=token,
                              lease_expires_at=_lease_until(), worker=worker,
                              celery_task_id=task_id or job.celery_task_id, exit_code=None, error="")

    if not gpus:  # the transition is one transaction of its own (no savepoint inside another)
        return job if running() else None
    try:
        with transaction.atomic():
            won = running()
            if won:  # the unique (worker, index) constraint: two jobs never hold one GPU
                GpuLease.objects.bulk_create([GpuLease(worker=worker, index=i, job_id=job.pk, lease_token=token)
                                              for i in gpus])
    except IntegrityError:  # another job took one of these GPUs first: the claim is rolled back
        return None
    return job if won else None


@retry_db
def job_release_gpus(job: Job, *, worker_id: int | None = None, token: int | None = None) -> int:
    """Give back the GPUs this attempt holds (leases of a newer claim are untouched); a gang
    member gives back only its own worker's (``worker_id``, ``token``)."""
    leases = GpuLease.objects.filter(job_id=job.pk)
    if worker_id is not None:
        return leases.filter(worker_id=worker_id, lease_token=token).delete()[0]
    return leases.filter(lease_token__lte=job.lease_token).delete()[0]


def job_renew(job: Job) -> str | None:
    """Extend the lease. Returns the job's status, or None if this worker no longer owns it."""
    owned = Job.objects.filter(pk=job.pk, lease_token=job.lease_token, status__in=[Status.RUNNING, Status.CANCELLING])
    if not owned.update(lease_expires_at=_lease_until()):
        return None
    return Job.objects.filter(pk=job.pk).values_list("status", flat=True).first()


def _max_restarts(job: Job) -> int:
    try:
        return job.spec_model.max_restarts
    except SpecError:  # a stored spec that no longer validates would fail again: no retry
        return 0


@retry_db
def job_finish(job: Job, outcome: Outcome) -> bool:
    """Record the final status (or a retry) if this worker still holds the lease; retries
    through a short database outage."""
    if outcome.status == slurm_adopt.DETACHED:  # a Slurm job running on without its worker
        return slurm_adopt.job_detach(job)
    current = Job.objects.filter(pk=job.pk, lease_token=job.lease_token).values_list("status", flat=True).first()
    if current not in (Status.RUNNING, Status.CANCELLING):
        return False
    # Each transition below compares against the status just read (``expect``), not the one
    # this instance was loaded with: a cancel may have arrived since.
    if current == Status.CANCELLING:
        new = Status.CANCELLED if outcome.status != Status.SUCCEEDED else Status.SUCCEEDED
        return job.transition(new, reason=outcome.reason, expect=current, exit_code=outcome.exit_code)
    interrupted = outcome.status == Status.QUEUED
    failures = job.attempt - job.interruptions  # runs that ended through the job's fault, this one included
    retry = outcome.status == Status.FAILED and failures <= _max_restarts(job)
    if interrupted or retry:
        why = outcome.reason if interrupted else f"attempt {job.attempt} failed ({outcome.reason}); retrying"
        # a new attempt number either way: the old run message becomes a no-op (the claim compares it)
        won = job.transition(Status.QUEUED, reason=why, expect=current,
                             exit_code=outcome.exit_code, error=outcome.reason, attempt=F("attempt") + 1,
                             interruptions=F("interruptions") + int(interrupted),
                             lease_expires_at=None, worker=None, celery_task_id="")  # sent again below
        if won:
            job.refresh_from_db()
            job_services.job_enqueue(job)
        return won
    error = "" if outcome.status == Status.SUCCEEDED else outcome.reason
    return job.transition(outcome.status, reason=outcome.reason, expect=current,
                          exit_code=outcome.exit_code, error=error)


def jobs_reconcile(now=None) -> int:
    """Recover jobs whose worker stopped renewing the lease (killed, host lost).

    Any worker may run this; every step is a compare-and-set fenced by the lease token, so
    concurrent reconcilers and a late-waking owner cannot double-handle a job. Returns how
    many jobs were recovered.
    """
    now = now or timezone.now()
    recovered = 0
    expired = Job.objects.filter(status__in=[Status.RUNNING, Status.CANCELLING], lease_expires_at__lt=now)
    for job in expired.select_related("pool")[:200]:
        if slurm_adopt.adopt_lost(job):  # its Slurm job runs on: follow it again, do not start another
            continue
        stale = Job.objects.filter(pk=job.pk, lease_token=job.lease_token, lease_expires_at__lt=now)
        # Take the lease away first: the old owner's writes stop matching its token.
        if not stale.update(lease_token=F("lease_token") + 1):
            continue
        job.refresh_from_db()
        job_release_gpus(job)
        if _job_lost(job):
            recovered += 1
    if recovered or _workers_newly_lost(now):
        # A dead worker also took the messages it had reserved (acks_late: redelivered only after
        # the visibility timeout, hours): send every queued job again; a duplicate is a no-op claim.
        Job.objects.filter(status=Status.QUEUED).exclude(celery_task_id="").update(celery_task_id="")
        now = now + timedelta(seconds=5)
    _resend_unsent(now)
    return recovered


def _job_lost(job: Job) -> bool:
    """Losing the machine is not the job's fault: back to the queue as an interruption (not
    against ``max_restarts``) to resume from its checkpoint, unless it has been interrupted
    more than ``TRAINHUB_MAX_INTERRUPTIONS`` times, which looks like a job that kills its workers."""
    why = f"worker {job.worker.hostname if job.worker else '?'} stopped renewing the lease"
    cap = settings.TRAINHUB_MAX_INTERRUPTIONS
    if job.status == Status.CANCELLING or job.interruptions < cap:  # job_finish makes a cancelling job cancelled
        return job_finish(job, Outcome(Status.QUEUED, None, f"interrupted: worker lost ({why})"))
    reason = (f"interrupted {job.interruptions + 1} times, more than TRAINHUB_MAX_INTERRUPTIONS={cap} allows "
              f"(the last: worker lost, {why}); find what kills its workers (memory, disk, the host) "
              f"or raise TRAINHUB_MAX_INTERRUPTIONS")
    return job.transition(Status.FAILED, reason=reason, expect=Status.RUNNING, error=reason)


def _workers_newly_lost(now) -> bool:
    """Whether a worker stopped heart-beating since the last look (also an idle one, which no
    expired lease reveals). Told once per death: the cache key names its last heartbeat."""
    from django.core.cache import cache

    stale = Worker.objects.filter(last_heartbeat__lt=now - timedelta(seconds=settings.TRAINHUB_LEASE_SECONDS))
    found = False
    for pk, beat in stale.values_list("pk", "last_heartbeat")[:100]:
        found |= cache.add(f"trainhub:worker-lost:{pk}:{beat.timestamp()}", 1, timeout=24 * 3600)
    return found


def _resend_unsent(now) -> None:
    """Jobs submitted while the broker was down have no task id: send them again, once the
    submit's own send has had time to happen (a duplicate send is a no-op claim anyway)."""
    unsent = Job.objects.filter(status=Status.QUEUED, celery_task_id="", created_at__lt=now - timedelta(seconds=5))
    if unsent.exists():
        log.info("re-sending %d queued job(s) whose message was never sent", job_services.job_requeue_lost(now))
