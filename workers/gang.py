"""A non-zero node of a multi-node job: its torchrun agent as a guarded subprocess.

Node 0 runs through the executor (logs, metrics, lease, outcome). The other nodes only need
their processes started, watched and stopped: their output goes to
``<run_dir>/logs/node<R>.out`` (torchrun also keeps per-rank copies), they stop as soon as
the job is no longer running under this gang's lease, and a node that fails fails the job.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from subprocess import STDOUT, Popen

from django.conf import settings

from trainhub.jobs.lifecycle import Outcome
from trainhub.jobs.models import Job, Status
from trainhub.pools.models import Workspace
from workers import executor, launch
from workers.runner.config import dump_yaml, parse_spec


def _group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_node(job: Job, *, launch_kwargs: dict, env_extra: dict[str, str]) -> Outcome | None:
    """Run this node until it exits or the job stops. Returns a failure to record, or None."""
    spec = parse_spec(job.spec)
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
    with open(run_dir / "logs" / f"node{rank}.out", "ab") as out:
        proc = Popen([sys.executable, "-m", "workers.guard", str(os.getpid()), "--", *argv], stdout=out,
                     stderr=STDOUT, cwd=launch.cwd(spec, run_dir, workspace), env=env, start_new_session=True)
    owned = Job.objects.filter(pk=job.pk, lease_token=job.lease_token, status=Status.RUNNING)
    stopped = False
    while proc.poll() is None:
        time.sleep(0.5)
        if executor.SHUTDOWN.is_set() or not owned.exists():
            stopped = True
            _group(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + settings.TRAINHUB_KILL_GRACE_SECONDS
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            break
    _group(proc.pid, signal.SIGKILL)
    code = proc.wait()
    if stopped or code == 0:
        return None
    return Outcome(Status.FAILED, code, f"node {rank} exited with code {code} (see logs/node{rank}.out)")
