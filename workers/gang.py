"""A non-zero node of a multi-node job: its torchrun agent as a guarded subprocess.

Node 0 runs through the executor (logs, metrics, lease, outcome). The other nodes only need
their processes started, watched and stopped: their output goes to
``<run_dir>/logs/node<R>.out`` (torchrun also keeps per-rank copies) and, through Redis, to
node 0's executor, which puts it in the job's log with its ranks (``gang_logs``); they stop as
soon as the job is no longer running under this gang's lease, and a node that fails fails the job.
"""
from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path
from subprocess import PIPE, Popen

from django.conf import settings

from trainhub.jobs.lifecycle import Outcome
from trainhub.jobs.models import Job, Status
from trainhub.pools.models import Workspace
from workers import executor, gang_logs
from workers.runner import launch
from workers.runner.config import dump_yaml


def _group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_node(job: Job, *, launch_kwargs: dict, env_extra: dict[str, str]) -> Outcome | None:
    """Run this node until it exits or the job stops. Returns a failure to record, or None."""
    spec = job.spec_model
    rank = launch_kwargs["node_rank"]
    run_dir = executor.run_dir_for(job)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    config = run_dir / f"job.node{rank}.yaml"
    config.write_text(dump_yaml(spec), encoding="utf-8")
    workspace = Path(Workspace.objects.get(name=spec.script.workspace).path) if spec.script else None
    argv = launch.argv(spec, config, run_dir, workspace_dir=workspace, **launch_kwargs)
    env = launch.env(spec, run_dir, workspace_dir=workspace)
    for name in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "TRAINHUB_SECRET_KEY", "REDIS_URL"):
        env.pop(name, None)
    env.update(env_extra)
    proc = Popen([sys.executable, "-m", "workers.guard", str(os.getpid()), "--", *argv], stdout=PIPE, stderr=PIPE,
                 cwd=launch.cwd(spec, run_dir, workspace), env=env, start_new_session=True)
    lines: queue.Queue = queue.Queue()
    readers = executor.pump_output(proc, lines)
    sender = gang_logs.Sender(job.pk, job.lease_token, rank, first_rank=rank * spec.resources.procs_per_node)
    owned = Job.objects.filter(pk=job.pk, lease_token=job.lease_token, status=Status.RUNNING)
    stopped = False
    next_check = time.monotonic()
    with open(run_dir / "logs" / f"node{rank}.out", "a", encoding="utf-8") as out:
        def forward() -> None:
            while True:
                try:
                    stream, items = lines.get_nowait()
                except queue.Empty:
                    break
                out.write("".join(f"[rank{r or sender.first_rank}]: {text}\n" for r, text in items))
                sender.add(stream, items)
            out.flush()
            sender.flush()

        while proc.poll() is None:
            time.sleep(executor.BATCH_SECONDS)
            forward()
            if time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + 0.5
            if executor.SHUTDOWN.is_set() or not owned.exists():
                stopped = True
                _group(proc.pid, signal.SIGTERM)
                deadline = time.monotonic() + settings.TRAINHUB_KILL_GRACE_SECONDS
                while proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.1)
                    forward()
                break
        _group(proc.pid, signal.SIGKILL)
        code = proc.wait()
        for reader in readers:
            reader.join(timeout=5)
        forward()
    sender.close()
    if stopped or code == 0:
        return None
    return Outcome(Status.FAILED, code, f"node {rank} exited with code {code} (see logs/node{rank}.out)")


class LeaderExecution(executor.Execution):
    """Node 0: the executor, with the other nodes' lines (from Redis) in the job's log."""

    #: after node 0's processes exit, how long to wait for the other nodes' last lines
    #: (within the 5 s the executor gives each reader thread)
    EOF_SECONDS = 4.5

    def start(self) -> None:
        super().start()
        receiver = gang_logs.Receiver(self.job.pk, self.job.lease_token, self.launch_kwargs["nnodes"])
        thread = threading.Thread(target=self._receive, args=(receiver,), daemon=True)
        thread.start()
        self.readers.append(thread)  # joined with the pipe readers once the processes exit

    def _receive(self, receiver: gang_logs.Receiver) -> None:
        ended_at = None
        while not receiver.done:
            for item in receiver.poll(200):
                self.lines.put(item)
            if self.proc is not None and self.proc.returncode is not None:  # the main thread polls it
                ended_at = ended_at or time.monotonic()
                if time.monotonic() - ended_at > self.EOF_SECONDS:
                    missing = sorted(receiver.nodes - receiver.ended)
                    self.system(f"node(s) {', '.join(map(str, missing))} sent no end of log; their last lines "
                                f"are in logs/node<R>.out")
                    break
        receiver.forget()
