"""One attempt of a job of a Slurm pool: the executor's supervision (log, metrics, lease,
cancel, watchdog, outcome) over one ``sbatch`` — one batch job whatever the number of nodes;
Slurm places it, allocates the GPUs and starts one launcher per node (``workers.slurm_node``).

What differs from a local run:

- the torchrun rendezvous of a multi-node job comes from the allocation (placeholders the
  node launcher fills in), and Slurm, not this worker, chooses the GPUs;
- while Slurm keeps the job pending, its reason (Priority, Resources …) goes into the job's
  log whenever it changes, and the wait counts neither for the timeout nor for the watchdog;
- the outcome says what Slurm says: time limit, out of memory, node failure, cancelled by
  an operator (a failure, with who when accounting knows), preempted (a failure, so it is
  retried from its checkpoint within ``max_restarts``).
"""
from __future__ import annotations

import time

from django.conf import settings

from trainhub.jobs.models import Job, Status
from trainhub.runs.lifecycle import Outcome
from workers import executor
from workers.backends.slurm import SlurmBackend, SlurmOptions
from workers.slurm_node import NODE_RANK, RDZV_HOST

REASON_SECONDS = 1.0


def options_for(job: Job, spec, grace: float) -> SlurmOptions:
    pool = job.pool
    res = spec.resources
    return SlurmOptions(slurm_conf=pool.slurm_conf, partition=pool.partition, account=pool.slurm_account_for(job.owner),
                        qos=pool.qos, nodes=res.nodes, procs_per_node=res.procs_per_node,
                        gpus_per_node=res.gpus_per_node, time_minutes=spec.timeout_minutes,
                        job_name=f"trainhub-{job.pk}-{spec.name}", lease_token=job.lease_token,
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
        self.waited = 0.0  # seconds spent pending, which no limit counts
        self.running_since: float | None = None
        self.next_reason = 0.0

    def flush_lines(self) -> bool:
        stored = super().flush_lines()
        now = time.monotonic()
        if self.handle is not None and now >= self.next_reason:
            self._follow_queue(now)
        return stored

    def _follow_queue(self, now: float) -> None:
        elapsed = now - (self.next_reason - REASON_SECONDS) if self.next_reason else 0.0
        self.next_reason = now + REASON_SECONDS
        state = self.handle.refresh()
        if state.pending:
            self.waited += elapsed
            self.log.activity = now  # waiting in Slurm's queue is not a hang
            reason = state.reason if state.reason not in ("", "None") else state.state
            if reason != self.waiting:
                self.waiting = reason
                self.system(f"waiting in Slurm's queue ({self.handle.describe()}): {reason}")
        elif state.state == "RUNNING" and self.running_since is None:
            self.running_since = now
            self.system(f"running as {self.handle.describe()}")

    def _limit_reached(self, now: float, started: float):
        return super()._limit_reached(now, started + self.waited)

    def outcome(self, stop, code: int) -> Outcome:
        if stop or code == 0 or self.handle is None:
            return super().outcome(stop, code)
        return Outcome(Status.FAILED, code, self.handle.reason())
