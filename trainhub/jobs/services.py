"""Job services for the web, API and CLI: submit, cancel, clone. The status machine is on ``Job``."""
from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from trainhub.jobs.models import Job, Status
from trainhub.jobs.specpaths import spec_places
from trainhub.pools.models import WorkerPool, Workspace
from trainhub.pools.services import pool_record
from workers.runner.config import JobSpec, SpecError, parse_spec
from workers.runner.preflight import preflight

log = logging.getLogger(__name__)

RUN_JOB_TASK = "trainhub.run_job"


def spec_validate(data: Any, owner=None) -> tuple[JobSpec, WorkerPool]:
    """Validate a spec mapping against the runner's model and this installation (pools, workspaces).

    Fills the pool's default priority and timeout where the spec sets none; with ``owner``,
    also checks that this user may submit to the pool."""
    spec = parse_spec(data)
    pool = next(iter(WorkerPool.objects.for_user(owner, name=spec.pool)), None)
    if pool is None:
        names = ", ".join(WorkerPool.objects.values_list("name", flat=True)) or "none exist yet"
        raise SpecError({"pool": f"no pool named {spec.pool!r}; choose one of: {names}"})
    if not pool.accepts_submissions:
        raise SpecError({"pool": f"pool {pool.name!r} is disabled by an administrator; choose another pool"})
    if not pool.user_allowed:
        raise SpecError({"pool": f"you may not submit to pool {pool.name!r} (restricted to some groups); "
                                 "choose another pool or ask an administrator for access"})
    if spec.sites:
        _check_sites(spec, owner)
    if pool.mode_list and spec.mode not in pool.mode_list:
        raise SpecError({"mode": f"pool {pool.name!r} accepts only {', '.join(pool.mode_list)} jobs; "
                                 "change the mode or choose another pool"})
    if "priority" not in spec.model_fields_set:
        spec.priority = max(-100, min(100, pool.default_priority))
    if "timeout_minutes" not in spec.model_fields_set and pool.default_timeout_minutes:
        spec.timeout_minutes = pool.default_timeout_minutes
    if not _exempt(owner):
        _check_limits(spec, pool, owner)
    gpus = spec.resources.gpus_per_node
    if gpus and not pool.has_gpus:
        raise SpecError({"resources.gpus_per_node": f"pool {pool.name!r} has no GPUs; set 0 or choose a GPU pool"})
    if gpus and pool.backend == "local":  # a Slurm pool's partition refuses what it cannot give
        most = pool_gpu_capacity(pool)
        if most is not None and gpus > most:
            raise SpecError({"resources.gpus_per_node": f"no worker of pool {pool.name!r} has {gpus} GPUs "
                                                        f"(the most is {most}); ask for {most} or fewer"})
    if gpus and spec.workload != "script" and pool.backend == "local" and only_fake_gpus(pool):
        raise SpecError({"resources.gpus_per_node": (
            f"pool {pool.name!r} has only declared GPUs (TRAINHUB_FAKE_GPUS), which have no CUDA device, and "
            f"{spec.workload} jobs train on CUDA; set gpus_per_node: 0 or choose a pool with real GPUs "
            "(fake GPUs are for trying scheduling and leases with script jobs)")})
    if spec.script and not Workspace.objects.filter(name=spec.script.workspace).exists():
        raise SpecError({"script.workspace": f"no workspace named {spec.script.workspace!r}; "
                                             "ask an administrator to register it"})
    if spec.checkpoint.start_from:
        _check_start_from(spec.checkpoint.start_from, owner)
    # Only places the owner may read, before anything looks at the path (workers check again).
    spec_places(spec, owner)
    # Missing paths, packages and entries are refused now, not ten minutes into the run.
    workspace = Workspace.objects.filter(name=spec.script.workspace).first() if spec.script else None
    preflight(spec, None, workspace_dir=workspace.path if workspace else None)
    return spec, pool


def _check_sites(spec: JobSpec, owner) -> None:
    """Every site of a cross-site job needs a pool that exists and takes jobs from this user (its
    kind, local or Slurm, decides how the site runs: ``workers.crosssite``)."""
    pools = {p.name: p for p in WorkerPool.objects.for_user(owner)}
    errors = {}
    for i, site in enumerate(spec.sites):
        pool = pools.get(site.pool)
        if pool is None:
            errors[f"sites.{i}.pool"] = f"no pool named {site.pool!r}; choose an existing pool for this site"
        elif not pool.accepts_submissions or not pool.user_allowed:
            errors[f"sites.{i}.pool"] = f"pool {site.pool!r} does not take your jobs now; choose another pool"
    if errors:
        raise SpecError(errors)


def _exempt(owner) -> bool:
    """Staff and superusers may exceed a pool's limits (an urgent rerun, a long benchmark)."""
    return owner is not None and (owner.is_staff or owner.is_superuser)


def _check_limits(spec: JobSpec, pool: WorkerPool, owner) -> None:
    """The pool's per-user limits at submit time; 0 = no limit (max_priority always applies)."""
    where = f"pool {pool.name!r}"
    if spec.priority > pool.max_priority:
        raise SpecError({"priority": f"{where} allows priorities up to {pool.max_priority}; "
                                     f"lower it to {pool.max_priority} or less"})
    if pool.max_timeout_minutes and "timeout_minutes" not in spec.model_fields_set:  # a default within the limit
        spec.timeout_minutes = min(spec.timeout_minutes, pool.max_timeout_minutes)
    if pool.max_timeout_minutes and spec.timeout_minutes > pool.max_timeout_minutes:
        raise SpecError({"timeout_minutes": f"{where} allows timeouts up to {pool.max_timeout_minutes} minutes; "
                                            f"set timeout_minutes to {pool.max_timeout_minutes} or less"})
    if pool.max_restarts_limit and spec.max_restarts > pool.max_restarts_limit:
        raise SpecError({"max_restarts": f"{where} allows up to {pool.max_restarts_limit} restarts; "
                                         f"set max_restarts to {pool.max_restarts_limit} or less"})
    if owner is not None and pool.max_queued_per_user:
        queued = Job.objects.filter(pool=pool, owner=owner, status=Status.QUEUED).count()
        if queued >= pool.max_queued_per_user:
            raise SpecError({"pool": f"you already have {queued} queued job(s) in {where}, its limit per user "
                                     f"(max_queued_per_user = {pool.max_queued_per_user}); wait for some to start, "
                                     "cancel some, or choose another pool"})


def _check_start_from(start_from: str, owner) -> None:
    """The checkpoint must exist and belong to a job this user may see."""
    from trainhub.jobs.rundir import checkpoint_dir

    source_id = int(start_from.split("/", 1)[0].removeprefix("job-"))
    visible = jobs_visible_to(owner) if owner is not None else Job.objects.all()
    path = checkpoint_dir(start_from)
    if not visible.filter(pk=source_id).exists() or not path.is_dir():
        raise SpecError({"checkpoint.start_from": f"no checkpoint {start_from!r} among your jobs; "
                                                  "pick one from a job page's checkpoint list"})


def pool_gpu_capacity(pool: WorkerPool) -> int | None:
    """The most GPUs one worker of the pool offers, or None when unknown (no worker seen yet)."""
    counts = list(pool.workers.values_list("gpu_count", flat=True))
    if not counts:
        return pool.gpus_per_worker or None
    most = max(counts)
    return min(most, pool.gpus_per_worker) if pool.gpus_per_worker else most


def only_fake_gpus(pool: WorkerPool) -> bool:
    """Every GPU the pool's workers reported is a declared one (TRAINHUB_FAKE_GPUS): no CUDA behind them."""
    gpus = [g for info in pool.workers.values_list("info", flat=True) for g in (info or {}).get("gpus", [])]
    return bool(gpus) and all(g.get("fake") for g in gpus)


def job_submit(*, owner, data: Any) -> Job:
    """Validate, store as ``queued`` and enqueue once stored: at once, or when the caller's transaction commits."""
    spec, pool = spec_validate(data, owner=owner)
    job = Job.submit(owner=owner, name=spec.name, mode=spec.mode, spec=spec.to_dict(), pool=pool,
                     priority=spec.priority)  # both of its rows or neither, without a transaction of ours
    transaction.on_commit(lambda: job_enqueue(job))
    return job


def job_enqueue(job: Job) -> None:
    """Send the run message to the pool's queue. The web never imports the task module."""
    from workers.app import app

    queues = [job.pool.queue]
    sites = job.spec_model.sites if job.spec.get("sites") else None
    if sites:  # a cross-site job: every site's pool hears of it (runs.crosssite)
        queues = list(WorkerPool.objects.filter(name__in=[s.pool for s in sites]).values_list("queue", flat=True))
    try:
        for queue in queues:
            result = app.send_task(RUN_JOB_TASK, args=[job.pk, job.attempt], queue=queue)
    except Exception:  # the broker is down: the job stays queued and is re-sent by reconcile
        log.exception("could not enqueue job %s; it stays queued", job.pk)
        return
    Job.objects.filter(pk=job.pk).update(celery_task_id=result.id)


def job_cancel(job: Job, *, actor=None, reason: str = "cancelled by user") -> bool:
    """Cancel a queued job at once, or ask the worker to stop a running one. Idempotent."""
    for _ in range(3):  # the status may move underneath us; retry on the fresh row
        if job.status == Status.QUEUED:
            if job.transition(Status.CANCELLED, reason=reason, actor=actor):
                return True
        elif job.status == Status.RUNNING:
            if job.transition(Status.CANCELLING, reason=reason, actor=actor):
                return True
        else:
            return False
    return False


def may_cancel(user, job: Job) -> bool:
    """Owners cancel their own jobs; anyone else needs the ``jobs.change_job`` permission (superusers
    have it): being staff shows every job but changes none of them."""
    return job.owner_id == user.pk or user.has_perm("jobs.change_job")


def pool_cancel_jobs(pool: WorkerPool, *, actor=None) -> int:
    """Cancel every queued and running job of the pool (running ones are stopped by their worker)."""
    count = 0
    for job in Job.objects.filter(pool=pool, status__in=[Status.QUEUED, Status.RUNNING]):
        count += job_cancel(job, actor=actor, reason=f"pool {pool.name}: all jobs cancelled by an administrator")
    pool_record(pool, actor, f"cancelled {count} job(s)")
    return count


def job_clone_spec(job: Job) -> dict[str, Any]:
    spec = dict(job.spec)
    spec["name"] = f"{job.name}-copy"[:200]
    return spec


def jobs_visible_to(user):
    qs = Job.objects.select_related("pool", "owner")
    return qs if user.is_staff else qs.filter(owner=user)


def job_requeue_lost(now=None) -> int:
    """Re-send queued jobs whose message was never sent (broker was down at submit)."""
    now = now or timezone.now()
    count = 0
    for job in Job.objects.filter(status=Status.QUEUED, celery_task_id="").select_related("pool")[:500]:
        job_enqueue(job)
        count += 1
    return count


def job_resume_spec(job: Job, checkpoint: str) -> dict[str, Any]:
    """``job``'s spec for a new job that starts from one of its checkpoints."""
    spec = job_clone_spec(job)
    spec["name"] = f"{job.name}-from-{checkpoint}"[:200]
    spec["checkpoint"] = {**job.spec_model.checkpoint.model_dump(mode="json", exclude_none=True), "resume": True,
                          "start_from": f"job-{job.pk}/checkpoints/{checkpoint}"}
    return spec


def job_resume_from(job: Job, checkpoint: str, *, owner) -> Job:
    """A new job with ``job``'s spec that starts from one of its checkpoints."""
    return job_submit(owner=owner, data=job_resume_spec(job, checkpoint))
