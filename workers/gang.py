"""A non-zero node of a multi-node job: its torchrun agent, started through the same backend
as the executor's (``workers.backends``).

Node 0 runs through the executor (logs, metrics, lease, outcome). The other nodes only need
their processes started, watched and stopped: their output goes to
``<run_dir>/logs/node<R>.out`` (torchrun also keeps per-rank copies) and, through Redis, to
node 0's executor, which puts it in the job's log with its ranks (``gang_logs``); they stop as
soon as the job is no longer running under this gang's lease, and a node that fails fails the job.
"""
from __future__ import annotations

import threading
import time

from django.conf import settings

from trainhub.runs.lifecycle import Outcome
from trainhub.jobs.models import Job, Status
from workers import backends, executor, gang_logs


def run_node(job: Job, *, launch_kwargs: dict, env_extra: dict[str, str], backend: str = "local") -> Outcome | None:
    """Run this node until it exits or the job stops. Returns a failure to record, or None."""
    spec = job.spec_model
    rank = launch_kwargs["node_rank"]
    run_dir = executor.run_dir_for(job)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    request = executor.prepare(job, spec, run_dir, config_name=f"job.node{rank}.yaml", launch_kwargs=launch_kwargs,
                               env_extra=env_extra)
    handle = backends.get(backend).start(request)
    sender = gang_logs.Sender(job.pk, job.lease_token, rank, first_rank=rank * spec.resources.procs_per_node)
    code, stopped = follow_node(job, handle, sender, run_dir / "logs" / f"node{rank}.out")
    sender.close()
    if stopped or code == 0:
        return None
    return Outcome(Status.FAILED, code, f"node {rank} exited with code {code} (see logs/node{rank}.out)")


def follow_node(job: Job, handle, sender: gang_logs.Sender, out_path, *,
                check_seconds: float = 0.5, on_check=None, held=None) -> tuple[int, bool]:
    """Follow a node that is not the leader until its processes exit: its lines go to
    ``out_path`` and, through ``sender``, to the leader's log; every ``check_seconds`` it calls
    ``on_check`` and stops the processes (with the grace period) once the job is no longer
    running under this lease, ``held()`` says the place is no longer this worker's (taken over),
    or the worker shuts down. Returns (exit code, whether it was stopped)."""
    owned = Job.objects.filter(pk=job.pk, lease_token=job.lease_token, status=Status.RUNNING)
    stopped, next_check = False, time.monotonic()
    with open(out_path, "a", encoding="utf-8") as out:
        def forward() -> None:
            for stream, items in handle.lines():
                out.write("".join(f"[rank{r}]: {text}\n" for r, text in items))
                sender.add(stream, items)
            out.flush()
            sender.flush()

        while handle.poll() is None:
            time.sleep(executor.BATCH_SECONDS if not stopped else 0.1)
            forward()
            if stopped or time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + check_seconds
            if on_check is not None:
                on_check()
            if executor.SHUTDOWN.is_set() or not owned.exists() or (held is not None and not held()):
                stopped = True
                handle.cancel(settings.TRAINHUB_GRACE_SECONDS)
        code = handle.poll()
        handle.close(executor.READERS_SECONDS)
        forward()
    return code, stopped


class LeaderExecution(executor.Execution):
    """Node 0: the executor, with the other nodes' lines (from Redis) in the job's log."""

    #: after node 0's processes exit, how long to wait for the other nodes' last lines
    #: (within the executor's READERS_SECONDS for its helper threads)
    EOF_SECONDS = 4.5

    def start(self) -> None:
        super().start()
        receiver = gang_logs.Receiver(self.job.pk, self.job.lease_token, self.launch_kwargs["nnodes"])
        thread = threading.Thread(target=self._receive, args=(receiver,), daemon=True)
        thread.start()
        self.helpers.append(thread)  # joined once the processes exit

    def _more(self, receiver: gang_logs.Receiver) -> bool:
        """Whether lines may still come: until every other node sent its end of log."""
        return not receiver.done

    def _receive(self, receiver: gang_logs.Receiver) -> None:
        ended_at = None
        while self._more(receiver):
            for item in receiver.poll(200):
                self.lines.put(item)
            if self.exited.is_set():
                ended_at = ended_at or time.monotonic()
                if time.monotonic() - ended_at > self.EOF_SECONDS:
                    missing = sorted(receiver.nodes - receiver.ended)
                    self.system(f"node(s) {', '.join(map(str, missing))} sent no end of log; their last lines "
                                f"are in logs/node<R>.out")
                    break
        receiver.forget()
