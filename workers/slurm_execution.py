"""One attempt of a job of a Slurm pool: the executor's supervision (log, metrics, lease,
cancel, watchdog, outcome) over one ``sbatch`` — one batch job whatever the number of nodes;
Slurm places it, allocates the GPUs and starts one launcher per node (``workers.slurm_node``).

What differs from a local run:

- the torchrun rendezvous of a multi-node job comes from the allocation (placeholders the
  node launcher fills in), and Slurm, not this worker, chooses the GPUs;
- while Slurm keeps the job pending, its reason (Priority, Resources …) goes into the job's
  log whenever it changes, its reason and its place in the partition's queue onto its
  ``SlurmRun`` row (the pages' waiting reason), and the wait counts neither for the timeout nor
  for the watchdog;
- the outcome says what Slurm says: time limit, out of memory, node failure, cancelled by
  an operator (a failure, with who when accounting knows), preempted (a failure, so it is
  retried from its checkpoint within ``max_restarts``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import time

from django.conf import settings
from django.utils import timezone

from trainhub.jobs.models import Job, Status
from trainhub.runs import slurm_adopt
from trainhub.runs.lifecycle import DB_ERRORS, Outcome
from trainhub.runs.models import SlurmRun
from workers import executor, process, slurm_cli
from workers.backends.slurm import SlurmBackend, SlurmHandle, SlurmOptions
from workers.slurm_node import NODE_RANK, RDZV_HOST

REASON_SECONDS = 1.0
#: Slurm enforces timeout_minutes (--time); the worker's own clock only stops a job Slurm failed to
LIMIT_MARGIN_SECONDS = 120


class _Detach(Exception):
    """The worker shuts down: stop following the Slurm job, leave it running."""


def owner_tag(job: Job) -> str:
    """``trainhub <deployment> job <id>``, the Slurm comment that says a Slurm job is this job's: the
    deployment is a digest of the secret key, so two TrainHubs sharing a Slurm account (both with a
    job 7) never take each other's jobs for their own."""
    deployment = hashlib.sha256(b"trainhub-slurm-owner:" + settings.SECRET_KEY.encode()).hexdigest()[:12]
    return f"trainhub {deployment} job {job.pk}"


def options_for(job: Job, spec, grace: float) -> SlurmOptions:
    pool = job.pool
    res = spec.resources
    return SlurmOptions(slurm_conf=pool.slurm_conf, partition=pool.partition, account=pool.slurm_account_for(job.owner),
                        qos=pool.qos, nodes=res.nodes, procs_per_node=res.procs_per_node,
                        gpus_per_node=res.gpus_per_node, time_minutes=spec.timeout_minutes,
                        job_name=f"trainhub-{job.pk}-{spec.name}", owner=owner_tag(job), lease_token=job.lease_token,
                        grace_seconds=grace, redis_url=settings.REDIS_URL)


class SlurmExecution(executor.Execution):
    def __init__(self, job: Job, env_extra: dict[str, str] | None = None, launch_kwargs: dict | None = None):
        env_extra = {k: v for k, v in (env_extra or {}).items() if k != "CUDA_VISIBLE_DEVICES"}  # Slurm's to set
        super().__init__(job, env_extra, launch_kwargs)
        nodes = self.spec.resources.nodes
        if nodes > 1:
            self.launch_kwargs = {"nnodes": nodes, "node_rank": NODE_RANK, "rdzv_endpoint": RDZV_HOST,
                                  "rdzv_id": f"job{job.pk}-{job.attempt}"}
        self.backend = SlurmBackend(options_for(job, self.spec, settings.TRAINHUB_GRACE_SECONDS))
        self.waiting = ""  # Slurm's last pending reason put in the log
        self.position: int | None = None  # and the job's last place in the partition's queue
        self.waited = 0.0  # seconds spent pending, which no limit counts
        self.running_since: float | None = None
        self.next_reason = 0.0
        self.recorded: dict | None = None  # the cursor last written to the SlurmRun row
        self.stored = True  # the last flush stored every pending line

    def start(self) -> None:
        super().start()
        self.recorded = {}
        if self.handle.orphans:
            self.system(f"cancelled slurm job(s) {', '.join(self.handle.orphans)} that an earlier attempt "
                        "left running (its worker was lost before it recorded them)")
        try:
            SlurmRun.objects.update_or_create(job_id=self.job.pk, defaults={
                "attempt": self.job.attempt, "slurm_job_id": self.handle.job_id, "stream_token": self.job.lease_token,
                "nodes": self.spec.resources.nodes, "cursor": {}, "cursor_seq": 0, "prev_cursor": {},
                "state": "PENDING", "pending_reason": "", "pending_position": None, "nodelist": "",
                "updated_at": timezone.now()})
        except Exception:  # a Slurm job no worker could ever follow again must not run on
            self.handle.close(0)
            raise

    def flush_lines(self, *, due: bool = False) -> bool:
        if self.handle is None:
            return super().flush_lines(due=due)
        self._take_output()  # what fits in the pending buffer; the rest waits in Redis (backpressure)
        if not due or self.log.due():  # the cursor is recorded only just before the lines it counts are stored
            cursor = self.handle.cursor
            if cursor != self.recorded and self.stored:
                # Before the lines it counts are stored: a worker adopting the job after a crash here
                # compares the log's length with cursor_seq to know which cursor holds.
                try:
                    SlurmRun.objects.filter(job_id=self.job.pk, attempt=self.job.attempt).update(
                        cursor=cursor, cursor_seq=self.log.number(), prev_cursor=self.recorded or {})
                    self.recorded = cursor
                except DB_ERRORS as exc:
                    self.outage.failed(exc)
                    return False
            self.stored = self.log.flush()
        now = time.monotonic()
        if now >= self.next_reason:
            self._follow_queue(now)
        return self.stored

    def _follow_queue(self, now: float) -> None:
        elapsed = now - (self.next_reason - REASON_SECONDS) if self.next_reason else 0.0
        self.next_reason = now + REASON_SECONDS
        state = self.handle.refresh()
        if state.pending:
            self.waited += elapsed
            self.log.activity = now  # waiting in Slurm's queue is not a hang
            reason = state.reason if state.reason not in ("", "None") else state.state
            position = slurm_cli.queue_position(self.handle.job_id, state.partition, self.handle.env)
            if reason != self.waiting:
                self.system(f"waiting in Slurm's queue ({self.handle.describe()}): {reason}")
            if (reason, position) != (self.waiting, self.position):
                self.waiting, self.position = reason, position
                self._record(state.state, reason, "", position)
        elif state.state == "RUNNING" and self.running_since is None:
            self.running_since = now
            self.system(f"running as {self.handle.describe()}")
            self._record(state.state, "", self.handle.describe().partition(" on ")[2], None)

    def _record(self, state: str, reason: str, nodelist: str, position: int | None) -> None:
        """What Slurm says, on the job's SlurmRun row for its pages (best effort: shown, not relied on)."""
        try:
            SlurmRun.objects.filter(job_id=self.job.pk, attempt=self.job.attempt).update(
                state=state, pending_reason=reason[:100], pending_position=position, nodelist=nodelist[:300],
                updated_at=timezone.now())
        except DB_ERRORS as exc:
            self.outage.failed(exc)

    def _limit_reached(self, now: float, started: float):
        if executor.SHUTDOWN.is_set():  # the Slurm job runs on without this worker
            raise _Detach
        return super()._limit_reached(now, started + self.waited + LIMIT_MARGIN_SECONDS)

    def run(self) -> Outcome:
        try:
            return super().run()
        except _Detach:
            self.flush_lines()
            self.system(f"this worker shuts down; slurm job {self.handle.job_id} runs on and the next worker of "
                        f"pool {self.job.pool.name} follows it")
            self.drain(10)
            self.handle.detach()
            return Outcome(slurm_adopt.DETACHED, None, "its worker shut down; the Slurm job runs on")

    def outcome(self, stop, code: int) -> Outcome:
        if stop or code == 0 or self.handle is None:
            return super().outcome(stop, code)
        return Outcome(Status.FAILED, code, self.handle.reason())


class AdoptedExecution(SlurmExecution):
    """A job whose Slurm job was submitted by a worker that since died: follow that Slurm job
    again instead of submitting one (``trainhub.runs.slurm_adopt``)."""

    def __init__(self, job: Job, followed: SlurmRun):
        super().__init__(job)
        self.followed = followed

    def start(self) -> None:
        followed = self.followed
        cursor = followed.stored_cursor(Job.objects.filter(pk=self.job.pk).values_list("log_lines", flat=True).get())
        opts = dataclasses.replace(self.backend.options, lease_token=followed.stream_token)
        env = {k: v for k, v in os.environ.items() if k not in process.SECRETS}
        self.handle = SlurmHandle.attach(opts, followed.slurm_job_id, self.job.pk, cursor, env)
        self.recorded = cursor
        self.waiting, self.position = followed.pending_reason, followed.pending_position
        if followed.state == "RUNNING":
            self.running_since = time.monotonic()  # its "running as" line is in the log already
        self.system(f"worker {self.job.worker.hostname if self.job.worker else '?'} follows slurm job "
                    f"{followed.slurm_job_id} again (its previous worker stopped); the log continues")


def adopt(job: Job) -> Outcome:
    """Follow the Slurm job of ``job``'s current attempt to its end (the job's lease already taken)."""
    followed = SlurmRun.objects.get(job_id=job.pk, attempt=job.attempt)
    return AdoptedExecution(job, followed).run()
