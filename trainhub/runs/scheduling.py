"""Which queued job a worker runs next, and with which GPUs.

A run message is a wake-up for its pool, not an order: the worker claims a queued job of the
pool that fits it *now*, fairly across users (``trainhub.runs.fair``: the user with the fewest
running jobs goes first; each user's own jobs by priority, then age; a smaller job may start
ahead of a bigger one that does not fit — backfill). Pool settings are read from the database
at every claim, so admin changes need no worker restart.

Every queued job keeps a message of its own: when a worker starts another job than the
message's, the message is sent again for its job; when nothing fits, it goes back to the
queue after a short wait, the job's status untouched.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cache

from django.db import IntegrityError, connection, transaction

from trainhub.core.sql import columns, from_row
from trainhub.jobs.models import Job, Status
from trainhub.pools.models import Worker, WorkerPool
from trainhub.pools.registry import free_address
from trainhub.runs import crosssite
from trainhub.runs.fair import BEST_ORDER, candidates, owner_usage
from trainhub.runs.lifecycle import job_claim
from trainhub.runs.models import GangMember, GpuLease
from workers.runner.errors import SpecError

RUNNING = (Status.RUNNING, Status.CANCELLING)
_claim_lock = threading.Lock()  # one claim at a time per worker process: slots are counted, then taken


@dataclass
class Decision:
    job: Job | None = None
    gpus: list[int] = field(default_factory=list)
    wait: str = ""  # nothing fits now: put the message back (status unchanged)
    drop: str = ""  # the message is stale (job cancelled, claimed or retried): forget it
    member: GangMember | None = None  # joined a multi-node job's gang (the job is still queued)


def needs(job: Job) -> tuple[int, int]:
    """Machines and GPUs per machine ``job`` asks for."""
    try:
        spec = job.spec_model
    except SpecError:  # claimed like any one-machine job; running it fails it with the spec's message
        return 1, 0
    if spec.sites:  # cross-site: every site's nodes are places of one gang
        return len(crosssite.places(spec)), spec.resources.gpus_per_node
    return spec.resources.nodes, spec.resources.gpus_per_node


def free_gpus(worker: Worker) -> list[int]:
    if not worker.usable_gpus:  # a CPU worker: nothing to read
        return []
    held = set(GpuLease.objects.filter(worker=worker).values_list("index", flat=True))
    return [i for i in range(worker.usable_gpus) if i not in held]


def slots_of(worker: Worker) -> int:
    """Job slots of ``worker``: its pool's per-worker slots, at most the threads it runs."""
    return min(worker.pool.slots_per_worker, worker.threads or worker.pool.slots_per_worker)


def slots_used(worker: Worker) -> int:
    """Single-node jobs running here plus this worker's places in gangs (waiting or running)."""
    return _single_running(worker) + len(_gang_places(worker))


def _single_running(worker: Worker) -> int:
    return Job.objects.filter(worker=worker, status__in=RUNNING).exclude(gang_members__isnull=False).count()


def _gang_places(worker: Worker) -> list[int]:
    """The jobs in whose gangs this worker holds a place (waiting or running), one per place."""
    return list(GangMember.objects.filter(worker=worker, done=False).values_list("job_id", flat=True))


def gang_join(job: Job, worker: Worker, gpus: list[int], nodes: int) -> GangMember | None:
    """Take the next node rank of this attempt's gang, with this worker's GPUs; None if full or raced."""
    try:
        with transaction.atomic():
            taken = GangMember.objects.filter(job=job, attempt=job.attempt).count()
            if taken >= nodes or not Job.objects.filter(pk=job.pk, status=Status.QUEUED, attempt=job.attempt).exists():
                return None
            member = GangMember.objects.create(job=job, attempt=job.attempt, worker=worker, node_rank=taken,
                                               address=free_address() if taken == 0 else "",
                                               lease_token=job.lease_token + 1)
            GpuLease.objects.bulk_create([GpuLease(worker=worker, index=i, job_id=job.pk,
                                                   lease_token=job.lease_token + 1) for i in gpus])
            return member
    except IntegrityError:  # another worker took this rank, or a GPU, first
        return None


def claim_next(hint_id: int, attempt: int, *, hostname: str, task_id: str = "") -> Decision:
    with _claim_lock:
        worker = _first_look(hint_id, hostname)
        if worker is None:  # not registered yet, unless the message is stale anyway
            hint = Job.objects.filter(pk=hint_id).values("status", "attempt").first()
            if hint is None or hint["status"] != Status.QUEUED or hint["attempt"] != attempt:
                return Decision(drop="not queued for this attempt (cancelled, or already claimed)")
            return Decision(wait=f"worker {hostname} is not registered yet")
        hint = worker.hint
        if hint is None or hint.status != Status.QUEUED or hint.attempt != attempt:
            return Decision(drop="not queued for this attempt (cancelled, or already claimed)")
        pool = worker.pool  # fresh from the database: drain, slots and limits take effect at once
        site_pools = _site_pools(hint.spec)
        if pool.pk != hint.pool_id and pool.name not in site_pools:
            return Decision(wait=f"the job belongs to another pool than {pool.name}")
        if pool.state != WorkerPool.State.ENABLED:
            return Decision(wait=f"pool {pool.name} is {pool.state}")
        slots = slots_of(worker)
        places = _gang_places(worker) if worker.gang_places else []
        running = worker.single_running + len(places)
        if running >= slots:
            return Decision(wait=f"all {slots} slot(s) of {hostname} are busy")
        if site_pools:
            return _join_site(hint_id, worker)
        first = hint if worker.first_best == hint.pk else None
        return _claim_fitting(pool, worker, hostname, task_id, slots - running, set(places), worker.last_owner, first)


def _first_look(hint_id: int, hostname: str) -> Worker | None:
    """The claim's first reads, in one statement: this worker (None if it is not registered), its pool as
    ``worker.pool``, and as the worker's attributes
    - ``hint``: the message's job, its whole row (None if the job is gone);
    - its busy slots: ``single_running`` (one-machine jobs running here), ``gang_places`` (places it holds in
      gangs, waiting or running);
    - ``last_owner``: the highest owner id among the pool's queued jobs (None: nothing queued), so the fair
      order's per-owner seeks know when to stop;
    - ``first_best``: the id of the first owner's best queued job (``fair.best_per_owner``'s first seek): when
      that is the message's own job, as for a job submitted to an idle pool, the claim reads no other job.

    A claim is on the submit -> running path, where each ORM query cost 10-20 times its SQL (building the
    statement, not running it) and, on PostgreSQL, each statement is a round trip: these were eight queries,
    then two statements. Written in SQL both backends run; ``tests/runs/test_claims.py`` runs it on each."""
    with connection.cursor() as cursor:
        cursor.execute(_first_look_sql(), [Status.RUNNING, Status.CANCELLING, False, Status.QUEUED, Status.QUEUED,
                                           hint_id, hostname])
        row = cursor.fetchone()
    if row is None:
        return None
    w, p, j = (len(m._meta.concrete_fields) for m in (Worker, WorkerPool, Job))
    worker = from_row(Worker, row[:w])
    worker.pool = from_row(WorkerPool, row[w:w + p])
    hint = row[w + p:w + p + j]
    worker.hint = from_row(Job, hint) if hint[Job._meta.concrete_fields.index(Job._meta.pk)] is not None else None
    worker.single_running, worker.gang_places, worker.last_owner, worker.first_best = row[w + p + j:]
    return worker


@cache  # the tables, their columns and quoting are fixed for a process
def _first_look_sql() -> str:
    job, member = Job._meta.db_table, GangMember._meta.db_table
    return f"""SELECT {columns(Worker, "w")}, {columns(WorkerPool, "p")}, {columns(Job, "j")},
                   (SELECT COUNT(*) FROM {job} r WHERE r.worker_id = w.id AND r.status IN (%s, %s)
                      AND NOT EXISTS (SELECT 1 FROM {member} g WHERE g.job_id = r.id)) AS single_running,
                   (SELECT COUNT(*) FROM {member} g WHERE g.worker_id = w.id AND g.done = %s) AS gang_places,
                   (SELECT MAX(q.owner_id) FROM {job} q WHERE q.pool_id = w.pool_id AND q.status = %s) AS last_owner,
                   (SELECT f.id FROM {job} f WHERE f.pool_id = w.pool_id AND f.status = %s
                    ORDER BY {BEST_ORDER} LIMIT 1) AS first_best
            FROM {Worker._meta.db_table} w JOIN {WorkerPool._meta.db_table} p ON p.id = w.pool_id
              LEFT JOIN {job} j ON j.id = %s
            WHERE w.hostname = %s"""


def _claim_fitting(pool: WorkerPool, worker: Worker, hostname: str, task_id: str, free_slots: int,
                   joined: set[int], last_owner: int | None, first: Job | None = None) -> Decision:
    """The first job in the fair order that fits this worker's free GPUs and its owner's caps
    (``joined``: jobs in whose gangs this worker already holds a place; ``last_owner``: the highest owner id
    with a queued job in the pool; ``first``: the first owner's best job, when the caller has read it)."""
    free = free_gpus(worker)
    usage = owner_usage(pool)
    capped: set[str] = set()
    for job in candidates(pool, usage, last_owner=last_owner, first=first) if last_owner is not None else ():
        nodes, gpus = needs(job)
        if _site_pools(job.spec):  # a cross-site job is taken through its own message (_join_site)
            continue
        why = usage.capped(job.owner_id, gpus)
        if why:
            capped.add(why)
            continue
        if pool.backend != "local":
            nodes, gpus = 1, 0  # Slurm places the nodes and allocates the GPUs itself
        if gpus > len(free) or job.pk in joined:
            continue
        if nodes > 1:
            member = gang_join(job, worker, free[:gpus], nodes)
            if member is not None:
                return Decision(job=job, gpus=free[:gpus], member=member)
            free = free_gpus(worker)
            continue
        job.pool = pool  # the row was read with the pool's jobs; the executor reads its settings
        claimed = job_claim(job.pk, job.attempt, hostname=hostname, task_id=task_id, gpus=free[:gpus], job=job,
                            worker=worker)
        if claimed is not None:
            return Decision(job=claimed, gpus=free[:gpus])
        free = free_gpus(worker)
    held = f"; waiting on per-user limits: {', '.join(sorted(capped))}" if capped else ""
    return Decision(wait=f"no queued job of pool {pool.name} fits {hostname} now "
                         f"({len(free)} free GPU(s), {free_slots} free slot(s)){held}")


def _site_pools(spec: dict) -> list[str]:
    """The pools of a cross-site job's sites ([] for any other job); read before the spec is parsed,
    so a worker of a site's pool (not the job's first pool) recognises the job's message."""
    sites = spec.get("sites") if isinstance(spec, dict) else None
    return [s.get("pool") for s in sites if isinstance(s, dict)] if isinstance(sites, list) else []


def _join_site(job_id: int, worker: Worker) -> Decision:
    """A cross-site job: take a place in its site's part of the gang (outside the fair order:
    the job's sites must gather within the gang timeout)."""
    job = Job.objects.select_related("pool").get(pk=job_id)
    if GangMember.objects.filter(job=job, attempt=job.attempt, worker=worker).exists():
        return Decision(wait=f"{worker.hostname} already holds a place in job {job.pk}")
    try:
        gpus = job.spec_model.for_site(_site_pools(job.spec).index(worker.pool.name)).resources.gpus_per_node
    except SpecError:
        return Decision(drop="its spec is no longer valid")
    if worker.pool.backend != "local":
        gpus = 0  # Slurm allocates the site's GPUs itself
    free = free_gpus(worker)
    if gpus > len(free):
        return Decision(wait=f"{worker.hostname} has {len(free)} free GPU(s), the site needs {gpus}")
    member = crosssite.join(job, worker, free[:gpus])
    if member is None:
        return Decision(wait=f"no free place of pool {worker.pool.name} in cross-site job {job.pk}")
    return Decision(job=job, gpus=free[:gpus], member=member)


def take_site_place(job_id: int, attempt: int, place: int, old_worker_id: int, restarts: int, *,
                    hostname: str) -> Decision:
    """A cross-site job's place whose worker is gone (``crosssite.places_reconcile``): this worker
    of the site's pool takes it over, if it has a free slot and the site's GPUs."""
    worker = Worker.objects.select_related("pool").filter(hostname=hostname).first()
    job = Job.objects.select_related("pool").filter(pk=job_id, attempt=attempt, status=Status.RUNNING).first()
    if worker is None or job is None:
        return Decision(drop="the job moved on, or this worker is not registered")
    try:
        spec = job.spec_model
        site, _ = crosssite.site_of(spec, place)
    except (SpecError, IndexError):
        return Decision(drop="its spec is no longer valid")
    if spec.sites[site].pool != worker.pool.name or worker.pool.state != WorkerPool.State.ENABLED:
        return Decision(drop=f"the place is of pool {spec.sites[site].pool}, or pool {worker.pool.name} is not enabled")
    gpus = spec.for_site(site).resources.gpus_per_node if worker.pool.backend == "local" else 0
    with _claim_lock:
        free = free_gpus(worker)
        if slots_used(worker) >= slots_of(worker) or gpus > len(free):
            return Decision(drop=f"{hostname} has no free slot or too few GPUs (another worker, or the next "
                                 f"reconcile, takes the place)")
        member = crosssite.take_over(job_id, attempt, place, old_worker_id, restarts, worker, free[:gpus])
    if member is None:
        return Decision(drop="another worker took the place, or this worker holds another place of the job")
    return Decision(job=job, gpus=free[:gpus], member=member)
