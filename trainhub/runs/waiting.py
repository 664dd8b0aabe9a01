"""Why a job has not started: one sentence a person can act on.

The claim (``scheduling.claim_next``) answers "which job fits this worker now"; this answers the
question from the job's side, with the same facts in the same order the claim checks them: the
pool's state, its online workers, a backend's own reason, the owner's per-user caps, whether
any worker could ever hold the job (GPUs on one host, nodes), free GPUs and slots now, and
otherwise the estimated place in the queue. Shown on the job page (live), in the job list, by
the API (``waiting_reason``) and by ``trainhub submit --follow``.

A backend that knows better (Slurm's own pending reason and queue place) registers a function
in ``BACKEND_REASONS``. It is asked for a queued job once the pool is enabled and has online
workers (a non-empty answer wins over the generic ones below), and it alone answers for a
*running* job: claimed by TrainHub but still held by the backend (Slurm keeps it pending). So a
job has one waiting reason, whichever scheduler holds it.
"""
from __future__ import annotations

from collections.abc import Callable

from django.db.models import Count
from django.utils import timezone

from trainhub.jobs.models import Job, Status
from trainhub.pools.models import Worker, WorkerPool, offline_after
from trainhub.runs.fair import owner_usage
from trainhub.runs.scheduling import free_gpus, needs, slots_of, slots_used

#: pool backend ("local", "slurm") -> job -> its backend's reason ("" to fall through to the generic ones)
BACKEND_REASONS: dict[str, Callable[[Job], str]] = {}


def _online(pool: WorkerPool):
    return Worker.objects.filter(pool=pool, last_heartbeat__gte=timezone.now() - offline_after())


def online_workers(pool: WorkerPool) -> list[Worker]:
    return list(_online(pool).select_related("pool"))


def pool_warning(pool: WorkerPool) -> str:
    """What a submitter to ``pool`` should know before waiting on it ("" when it starts jobs)."""
    if pool.state == WorkerPool.State.DRAINING:
        return f"pool {pool.name} is draining: queued jobs wait until an administrator enables it again"
    if pool.state == WorkerPool.State.DISABLED:
        return f"pool {pool.name} is disabled: queued jobs wait until an administrator enables it"
    if not _online(pool).exists():  # every API submit asks: no rows, no ordering by the pool's name
        return (f"no worker of pool {pool.name} is online: the job waits until one starts "
                f"(an administrator starts one with `.venv/bin/python manage.py runworker --pool {pool.name}`)")
    return ""


def held_reason(job: Job) -> str:
    """Why a claimed (running) job's processes have not started: its backend's answer, or ""."""
    backend = BACKEND_REASONS.get(job.pool.backend)
    return backend(job) if backend else ""


def waiting_reason(job: Job) -> str:
    """Why ``job`` is still queued, or claimed but held by its backend ("" otherwise)."""
    if job.status == Status.RUNNING:
        return held_reason(job)
    if job.status != Status.QUEUED:
        return ""
    pool = job.pool
    warning = pool_warning(pool)
    if warning:
        return warning
    backend = BACKEND_REASONS.get(pool.backend)
    said = backend(job) if backend else ""
    if said:
        return said
    usage = owner_usage(pool)
    nodes, gpus = needs(job)
    if not job.owner.is_staff and not job.owner.is_superuser:
        capped = usage.capped(job.owner_id, gpus * nodes)
        if capped.startswith("max_running"):
            return (f"your limit of {pool.max_running_per_user} running job(s) in pool {pool.name} is reached: "
                    f"it starts when one of yours ends")
        if capped:
            return (f"your limit of {pool.max_gpus_per_user} GPU(s) in pool {pool.name} is reached: "
                    f"it starts when your running jobs free enough")
    if pool.backend == "local":
        workers = online_workers(pool)
        if gpus and max(w.usable_gpus for w in workers) < gpus:
            most = max(w.usable_gpus for w in workers)
            return (f"waiting for {gpus} GPUs on one host: no online worker of pool {pool.name} has that many "
                    f"(the largest offers {most}); lower resources.gpus_per_node or add a bigger worker")
        if nodes > len(workers):
            return (f"waiting for {nodes} workers of pool {pool.name} to take the job together "
                    f"({len(workers)} online)")
        if gpus and max(len(free_gpus(w)) for w in workers) < gpus:
            return f"waiting for {gpus} GPUs on one host to be free (other jobs hold them)"
        if all(slots_used(w) >= slots_of(w) for w in workers):
            return f"#{job.queue_position()} in the queue of pool {pool.name}: every worker is busy"
    return f"#{job.queue_position()} in the queue of pool {pool.name}"


def waiting_reasons(jobs: list[Job]) -> dict[int, str]:
    """``waiting_reason`` for a page of jobs in a fixed number of queries (the job list; its
    Slurm rows come with the jobs, ``select_related("slurm_run")``).

    The pool's state, its online workers, a backend's reason, the owner's running cap and the
    estimated queue place (the same estimate as ``Job.queue_position``); the GPU-fit reasons need
    each worker's leases and are left to the job's own page."""
    reasons = {j.pk: said for j in jobs if j.status == Status.RUNNING and (said := held_reason(j))}
    queued = [j for j in jobs if j.status == Status.QUEUED]
    if not queued:
        return reasons
    pool_ids = {j.pool_id for j in queued}
    since = timezone.now() - offline_after()
    online = dict(Worker.objects.filter(pool_id__in=pool_ids, last_heartbeat__gte=since).values("pool_id")
                  .annotate(n=Count("id")).values_list("pool_id", "n"))
    rows = list(Job.objects.filter(pool_id__in=pool_ids, status__in=(Status.QUEUED, Status.RUNNING, Status.CANCELLING))
                .values_list("pk", "pool_id", "owner_id", "priority", "status"))
    running: dict[tuple[int, int], int] = {}
    waiting: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for pk, pool_id, owner_id, priority, status in rows:
        if status == Status.QUEUED:
            waiting.setdefault((pool_id, owner_id), []).append((-priority, pk))
        else:
            running[pool_id, owner_id] = running.get((pool_id, owner_id), 0) + 1
    for job in queued:
        pool = job.pool
        if pool.state != WorkerPool.State.ENABLED or not online.get(pool.pk):
            reasons[job.pk] = pool_warning(pool) if pool.state != WorkerPool.State.ENABLED else (
                f"no worker of pool {pool.name} is online: the job waits until one starts")
            continue
        backend = BACKEND_REASONS.get(pool.backend)
        said = backend(job) if backend else ""
        mine_running = running.get((pool.pk, job.owner_id), 0)
        exempt = job.owner.is_staff or job.owner.is_superuser
        if said:
            reasons[job.pk] = said
        elif pool.max_running_per_user and mine_running >= pool.max_running_per_user and not exempt:
            reasons[job.pk] = f"your limit of {pool.max_running_per_user} running job(s) in pool {pool.name} is reached"
        else:
            reasons[job.pk] = f"#{_place(job, waiting, running)} in the queue of pool {pool.name}"
    return reasons


def _place(job: Job, waiting: dict, running: dict) -> int:
    """``Job.queue_position``'s estimate from rows already read."""
    key = (-job.priority, job.pk)
    mine = sum(1 for other in waiting.get((job.pool_id, job.owner_id), []) if other < key) + 1
    turn = running.get((job.pool_id, job.owner_id), 0) + mine
    ahead = 0
    for (pool_id, owner_id), queue in waiting.items():
        if pool_id == job.pool_id and owner_id != job.owner_id:
            ahead += min(len(queue), max(0, turn - 1 - running.get((pool_id, owner_id), 0)))
    return mine + ahead
