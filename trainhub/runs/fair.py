"""The fair claim order: one user's deep queue cannot crowd out everyone else.

Among each user's best queued job (priority, then age — ``QUEUE_ORDER``) the job whose owner
has the fewest running jobs in the pool goes first (ties: higher priority, then the owner whose
last job started longest ago — a round-robin, so with one slot two users take turns — then
older). When
none of those best jobs fits the worker, each owner's next jobs are tried in the same owner
order, up to ``PER_OWNER`` of them, so a job that cannot fit does not block its owner's others.

Cost does not grow with queue depth: the owners and their best jobs come from one index seek
per distinct queued owner, and each owner's last start from one more (a "loose index scan" on ``job_fair_claim`` — portable, no
``DISTINCT ON``), so a claim costs O(owners × log jobs). That is fine for the tens of users a
pool has; a pool with thousands of distinct queued owners would want a per-owner summary table.
"""
from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from datetime import datetime, timezone

from django.contrib.auth import get_user_model
from django.db.models import Count, Q

from trainhub.core.sql import columns
from trainhub.jobs.models import QUEUE_ORDER, Job, Status
from trainhub.pools.models import WorkerPool
from trainhub.runs.models import GpuLease

RUNNING = (Status.RUNNING, Status.CANCELLING)
PER_OWNER = 50  # an owner's queued jobs looked at per claim when their best ones do not fit
_PAGE = 10
_NEVER = datetime.min.replace(tzinfo=timezone.utc)  # an owner never served goes first among equals


class Usage:
    """What each owner holds in the pool now, and the pool's claim-time caps.

    Each figure is read from the database the first time it is needed: a claim in a pool without
    per-user caps and with one queued owner needs neither (a claim is on the submit -> running path)."""

    def __init__(self, pool: WorkerPool):
        self.pool_id = pool.pk
        self.max_running, self.max_gpus = pool.max_running_per_user, pool.max_gpus_per_user
        self.exempt: set[int] = set()  # staff and superusers may exceed the caps

    @cached_property
    def running(self) -> dict[int, int]:
        rows = (Job.objects.filter(pool_id=self.pool_id, status__in=RUNNING).values("owner_id")
                .annotate(n=Count("id")).values_list("owner_id", "n"))
        return dict(rows)

    @cached_property
    def gpus(self) -> dict[int, int]:
        rows = (GpuLease.objects.filter(worker__pool_id=self.pool_id).values("job__owner_id")
                .annotate(n=Count("id")).values_list("job__owner_id", "n"))
        return dict(rows)

    @property
    def caps(self) -> bool:
        return bool(self.max_running or self.max_gpus)

    def capped(self, owner_id: int, gpus: int) -> str:
        """Why this owner's job may not start now ("" when it may)."""
        if owner_id in self.exempt:
            return ""
        if self.max_running and self.running.get(owner_id, 0) >= self.max_running:
            return f"max_running_per_user = {self.max_running}"
        if self.max_gpus and gpus and self.gpus.get(owner_id, 0) + gpus > self.max_gpus:
            return f"max_gpus_per_user = {self.max_gpus}"
        return ""


def owner_usage(pool: WorkerPool) -> Usage:
    return Usage(pool)


def best_per_owner(pool: WorkerPool, last_owner: int | None = None, first: Job | None = None) -> list[Job]:
    """Each queued owner's best job, one index seek per owner (owner ascending). ``last_owner``: the highest
    owner id with a queued job, when the caller knows it (the seek that would find nobody after it is left out);
    ``first``: the first owner's best job, when the caller has read it (the claim's first look)."""
    best: list[Job] = []
    job = first if first is not None else _best_after(pool, 0)
    while job is not None:
        best.append(job)
        if job.owner_id == last_owner:
            break
        job = _best_after(pool, job.owner_id)
    return best


def _order(fields) -> str:
    return ", ".join(f"{Job._meta.get_field(f.lstrip('-')).column} {'DESC' if f.startswith('-') else 'ASC'}"
                     for f in fields)


#: owners in id order, each owner's jobs in ``QUEUE_ORDER``: the first row of a pool's queued jobs so ordered is the
#: first owner's best job (an index seek on ``job_fair_claim``)
BEST_ORDER = _order(("owner_id", *QUEUE_ORDER))
_BEST_AFTER = (f"SELECT {columns(Job)} FROM {Job._meta.db_table} WHERE pool_id = %s AND status = %s AND owner_id > %s "
               f"ORDER BY {BEST_ORDER} LIMIT 1")


def _best_after(pool: WorkerPool, owner_id: int) -> Job | None:
    """The best queued job (``QUEUE_ORDER``) of the first owner after ``owner_id``: whole rows, the claim takes
    one as it is. Written in SQL (one seek on ``job_fair_claim``): it is on the submit -> running path, where
    the ORM spent ~10 times longer building this query than running it."""
    return next(iter(Job.objects.raw(_BEST_AFTER, [pool.pk, Status.QUEUED, owner_id])), None)


def last_started(pool: WorkerPool, owners: list[int]) -> dict[int, datetime]:
    """When each owner's most recent job in the pool started (one seek each on ``job_fair_served``)."""
    started = Job.objects.filter(pool=pool, started_at__isnull=False).order_by("-started_at")
    found = {o: started.filter(owner_id=o).values_list("started_at", flat=True).first() for o in owners}
    return {o: at for o, at in found.items() if at is not None}


def _after(job: Job) -> Iterator[Job]:
    """The same owner's queued jobs behind ``job`` in QUEUE_ORDER, a page at a time, up to PER_OWNER."""
    seen = 1
    while seen < PER_OWNER:
        behind = Q(priority__lt=job.priority) | Q(priority=job.priority, id__gt=job.pk)
        page = list(Job.objects.filter(behind, pool_id=job.pool_id, status=Status.QUEUED, owner_id=job.owner_id)
                    .order_by(*QUEUE_ORDER)[:min(_PAGE, PER_OWNER - seen)])
        yield from page
        if len(page) < _PAGE:
            return
        seen += len(page)
        job = page[-1]


def candidates(pool: WorkerPool, usage: Usage, *, last_owner: int | None = None,
               first: Job | None = None) -> Iterator[Job]:
    """Queued jobs in the fair order: every owner's best job first, then each owner's next ones
    (``last_owner``, ``first``: as ``best_per_owner`` takes them)."""
    best = best_per_owner(pool, last_owner, first)
    if len(best) > 1:  # one owner: nothing to order
        served = last_started(pool, [j.owner_id for j in best])
        best.sort(key=lambda j: (usage.running.get(j.owner_id, 0), -j.priority, served.get(j.owner_id, _NEVER), j.pk))
    if usage.caps:  # without caps nobody needs exempting
        staff = Q(is_staff=True) | Q(is_superuser=True)
        usage.exempt = set(get_user_model().objects.filter(staff, pk__in=[j.owner_id for j in best])
                           .values_list("pk", flat=True))
    yield from best
    for job in best:
        if not usage.capped(job.owner_id, 0):  # a running cap holds all of the owner's jobs
            yield from _after(job)
