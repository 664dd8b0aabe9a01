"""Celery tasks: thin. Load the job, claim it, hand it to the executor, record the outcome."""
from __future__ import annotations

import ctypes
import logging
import random
import sys
import time

import django

django.setup()

from django.db import close_old_connections  # noqa: E402

from celery.signals import (  # noqa: E402
    task_postrun, task_prerun, worker_init, worker_ready, worker_shutdown, worker_shutting_down)

from trainhub.runs.lifecycle import DB_ERRORS, Outcome, drop_connection, job_finish, job_release_gpus  # noqa: E402
from trainhub.jobs import retention  # noqa: E402
from trainhub.jobs.models import Job, LogLine, Status  # noqa: E402
from trainhub.jobs.services import job_enqueue  # noqa: E402
from trainhub.pools import registry  # noqa: E402
from trainhub.pools.models import Worker  # noqa: E402
from trainhub.runs import crosssite as crosssite_places  # noqa: E402
from trainhub.runs import gang, heartbeat, scheduling, slurm_adopt  # noqa: E402
from trainhub.runs.models import GangMember  # noqa: E402
from workers import crosssite, executor  # noqa: E402
from workers import gang as gang_node  # noqa: E402
from workers.app import app  # noqa: E402

log = logging.getLogger(__name__)
#: how long a message that fits nowhere waits before going back to the queue
WAIT_SECONDS = 1.0
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
#: the longest wait between claims while the database is unavailable (1, 2, 4 … s)
CLAIM_RETRY_MAX_SECONDS = 30


@app.task(name="trainhub.run_job", bind=True, max_retries=None)
def run_job(self, job_id: int, attempt: int = 1) -> str:
    try:
        decision = scheduling.claim_next(job_id, attempt, hostname=self.request.hostname or "",
                                         task_id=self.request.id or "")
        if decision.drop:
            return f"skipped: {decision.drop}"
        if decision.job is None:
            _send_again(job_id, wait=WAIT_SECONDS * random.uniform(0.8, 1.5))
            return f"requeued: {decision.wait}"
    except DB_ERRORS as exc:
        # Nothing was claimed (a claim is one transaction): the message must not be used up, or
        # the job would wait in the queue with no message. Celery sends it again, through the broker.
        delay = min(CLAIM_RETRY_MAX_SECONDS, 2 ** min(self.request.retries, 5))
        log.warning("job %s: database unavailable while claiming (%s); trying again in %d s", job_id, exc, delay)
        drop_connection()
        raise self.retry(countdown=delay, exc=exc) from None
    job = decision.job
    if job.pk != job_id:  # this message started a better job; its own job keeps a message
        _send_again(job_id)
    env_extra = _gpu_env(job, decision.gpus)
    if decision.member is not None:
        return _run_gang_member(decision.member, env_extra, task_id=self.request.id or "")
    try:
        outcome = executor.execute(job, env_extra=env_extra)
    except Exception as exc:  # the executor itself broke: record it, never leave the job running
        log.exception("executor failed for job %s", job.pk)
        outcome = Outcome(Status.FAILED, None, f"worker error: {exc}")
    finally:
        job_release_gpus(job)
    job_finish(job, outcome)
    _trim_logs(job)
    return outcome.status


@app.task(name=slurm_adopt.ADOPT_TASK)
def adopt_slurm_job(job_id: int, lease_token: int) -> str:
    """Follow a Slurm pool's job whose worker is gone to its end (``trainhub.runs.slurm_adopt``)."""
    from workers import slurm_execution

    job = slurm_adopt.job_adopt(job_id, lease_token, hostname=adopt_slurm_job.request.hostname or "")
    if job is None:
        return "skipped: adopted already, ended, or its worker is alive"
    try:
        outcome = slurm_execution.adopt(job)
    except Exception as exc:  # never leave the job running with nobody following it
        log.exception("following job %s again failed", job.pk)
        outcome = Outcome(Status.FAILED, None, f"worker error while following its Slurm job again: {exc}")
    job_finish(job, outcome)
    _trim_logs(job)
    return outcome.status


@app.task(name=crosssite_places.TAKEOVER_TASK)
def take_site_place(job_id: int, attempt: int, place: int, old_worker_id: int, restarts: int) -> str:
    """Take over a cross-site job's place whose worker is gone (``trainhub.runs.crosssite``) and run its site."""
    decision = scheduling.take_site_place(job_id, attempt, place, old_worker_id, restarts,
                                          hostname=take_site_place.request.hostname or "")
    if decision.member is None:
        return f"skipped: {decision.drop}"
    member = decision.member
    lost = Worker.objects.filter(pk=old_worker_id).values_list("hostname", flat=True).first() or "?"
    try:
        return _run_site_place(member, decision.job, _gpu_env(decision.job, decision.gpus), lost=lost)
    finally:
        _let_go(member)


def _gpu_env(job: Job, gpus: list[int]) -> dict[str, str]:
    if gpus:
        return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
    # a job that asked for no GPU on a GPU pool sees none
    return {"CUDA_VISIBLE_DEVICES": ""} if job.pool.kind == job.pool.Kind.GPU else {}


def _run_gang_member(member: GangMember, env_extra: dict[str, str], *, task_id: str) -> str:
    """Hold this worker's place in a multi-node job's gang; run its node once all have joined."""
    nodes = scheduling.needs(member.job)[0]
    try:
        if GangMember.objects.filter(job_id=member.job_id, attempt=member.attempt).count() < nodes:
            _send_again(member.job_id)  # so that another worker hears of the gang
        started = gang.gang_wait(member, nodes, task_id=task_id, stop=executor.SHUTDOWN)
        if isinstance(started, str):
            return f"gang not started: {started}"
        job = started
        if job.spec_model.sites:
            return _run_site_place(member, job, env_extra)
        launch_kwargs = {"nnodes": nodes, "node_rank": member.node_rank, "rdzv_endpoint": gang.leader_address(member),
                         "rdzv_id": f"job{job.pk}-{job.attempt}"}
        if member.node_rank == 0:
            # c10d numbers nodes by sorted address: an IP (digits) sorts before the other nodes' host
            # names, so node 0 — whose output the executor records — also runs global rank 0.
            env_extra = {**env_extra, "PET_LOCAL_ADDR": launch_kwargs["rdzv_endpoint"].rsplit(":", 1)[0]}
        if member.node_rank:
            try:
                failure = gang_node.run_node(job, launch_kwargs=launch_kwargs, env_extra=env_extra)
            except Exception as exc:
                log.exception("node %s of job %s could not run", member.node_rank, job.pk)
                failure = Outcome(Status.FAILED, None, f"node {member.node_rank}: worker error: {exc}")
            if failure is not None:
                job_finish(job, failure)
            return f"node {member.node_rank} done"
        try:
            outcome = gang_node.LeaderExecution(job, env_extra, launch_kwargs).run()
        except Exception as exc:
            log.exception("executor failed for job %s", job.pk)
            outcome = Outcome(Status.FAILED, None, f"worker error: {exc}")
        job_release_gpus(job, worker_id=member.worker_id, token=member.lease_token)
        job_finish(job, outcome)
        _trim_logs(job)
        return outcome.status
    finally:
        _let_go(member)


def _let_go(member: GangMember) -> None:
    """A gang member's thread ends: its GPUs back, its slot free (a place taken over is no longer its own)."""
    job_release_gpus(member.job, worker_id=member.worker_id, token=member.lease_token)
    GangMember.objects.filter(pk=member.pk, worker_id=member.worker_id).update(done=True)


def _run_site_place(member: GangMember, job: Job, env_extra: dict[str, str], lost: str = "") -> str:
    """A cross-site job's place (``workers.crosssite``); place 0 records the job's outcome. ``lost``:
    the worker whose place this one took over."""
    try:
        outcome = crosssite.run_place(member, job, env_extra, lost=lost)
    except Exception as exc:
        log.exception("place %s of cross-site job %s could not run", member.node_rank, job.pk)
        outcome = Outcome(Status.FAILED, None, f"place {member.node_rank}: worker error: {exc}")
    if member.node_rank == 0:
        job_release_gpus(job, worker_id=member.worker_id, token=member.lease_token)
    if outcome is not None:
        job_finish(job, outcome)
    if member.node_rank == 0:
        _trim_logs(job)
    return outcome.status if outcome is not None else f"place {member.node_rank} done"


def _send_again(job_id: int, wait: float = 0.0) -> None:
    """Put a queued job's message back at the end of its pool's queue (status unchanged)."""
    if wait:
        time.sleep(wait)
    job = Job.objects.select_related("pool").filter(pk=job_id, status=Status.QUEUED).first()
    if job is not None:
        job_enqueue(job)


def _trim_logs(job: Job) -> None:
    """Cut a finished job's log to what its pool keeps (``log_retention_lines``, else
    ``TRAINHUB_LOG_RETENTION``, by default 1,000,000 lines): the first and the newest lines, one
    marker line where the middle was — the log pipeline's own cut, see retention.py."""
    try:
        keep = retention.lines_kept(job.pool)
        if not keep or Job.objects.filter(pk=job.pk, status__in=[Status.QUEUED, Status.RUNNING]).exists():
            return
        last = LogLine.objects.filter(job_id=job.pk).order_by("-seq").values_list("seq", flat=True).first()
        if last is not None:
            retention.enforce(job.pk, last + 1, keep, job.pool.name)
    except DB_ERRORS as exc:  # the job is final already; the cut can wait
        log.warning("job %s: log not cut to the pool's retention, database unavailable (%s)", job.pk, exc)


@worker_init.connect
def _close_to_jobs(**_):
    """Training code runs as the worker's user. Marked non-dumpable, the worker's
    ``/proc/<pid>/environ`` and memory are closed to processes of that user without
    CAP_SYS_PTRACE, so a job cannot read the ``DATABASE_URL`` or ``REDIS_URL`` the worker holds
    (the executor already leaves them out of the job's own environment). Jobs themselves start
    dumpable again (``execve`` resets it)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        log.warning("could not mark the worker non-dumpable (errno %s): jobs of this user may read its environment",
                    ctypes.get_errno())


@task_prerun.connect
@task_postrun.connect
def _close_old_connections(**_):
    """As Django does at a request's start and end: drop this thread's connection if it broke or
    outlived CONN_MAX_AGE (0 unless ``runworker`` set it), and check it before its next use."""
    try:
        close_old_connections()
    except DB_ERRORS:  # a broken connection may fail to close: it is dropped either way
        drop_connection()


@worker_ready.connect
def _register(sender, **_):
    hostname = getattr(sender, "hostname", "")
    if heartbeat.worker_start(hostname) is not None:  # registers in the pool, then beats
        slurm_adopt.adopt_on_start(hostname)  # Slurm jobs its previous run followed: follow them again


@worker_shutting_down.connect
def _stop_jobs(**_):
    executor.SHUTDOWN.set()


@worker_shutdown.connect
def _unregister(sender, **_):
    registry.worker_offline(getattr(sender, "hostname", ""))
