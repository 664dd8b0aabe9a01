"""A job's code runs as the worker's user, but cannot read the worker's environment through
/proc (the worker is non-dumpable): no DATABASE_URL or REDIS_URL for a job to steal.

As root every process may read every other's /proc files (CAP_SYS_PTRACE), so the worker runs
here as a worker runs in production, without capabilities (``setpriv``), and so do its jobs.
"""
from __future__ import annotations

import shutil

import pytest

from tests.conftest import wait_for

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")]

# Walks up from the job's process and prints what each ancestor's environment would give away.
SNOOP = """
import os
pid = os.getppid()
while pid > 1:
    with open(f"/proc/{pid}/stat") as f:
        parent = int(f.read().rsplit(")", 1)[1].split()[1])
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            keys = [item.split(b"=", 1)[0].decode() for item in f.read().split(b"\\0") if b"=" in item]
        print("READABLE", pid, " ".join(sorted(keys)), flush=True)
    except OSError as exc:
        print("CLOSED", pid, exc.strerror, flush=True)
    pid = parent
"""
NO_CAPS = ("setpriv", "--bounding-set=-all", "--inh-caps=-all", "--")


def test_a_job_cannot_read_the_workers_secrets_through_proc(start_worker, cpu_pool, user, tmp_path):
    from trainhub.jobs import logs
    from trainhub.jobs.models import Job
    from trainhub.jobs.services import job_submit
    from trainhub.pools.models import Workspace

    workspace = tmp_path / "snoop"
    workspace.mkdir()
    (workspace / "snoop.py").write_text(SNOOP)
    Workspace.objects.create(name="snoop", path=str(workspace))
    # this defence is for unsandboxed pools; a root worker without capabilities cannot make namespaces
    type(cpu_pool).objects.filter(pk=cpu_pool.pk).update(sandbox="off")
    worker = start_worker("cpu", prefix=NO_CAPS)
    job = job_submit(owner=user, data={"mode": "script", "script": {"workspace": "snoop", "entry": "snoop.py"}})
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=120, message="the job to finish")
    lines = [line.text for line in logs.read_lines(job.pk, limit=1000)]
    assert done.status == "succeeded", (done.error, lines[-10:])
    report = [t for t in lines if t.startswith(("READABLE", "CLOSED"))]
    closed = {int(t.split()[1]) for t in report if t.startswith("CLOSED")}
    assert worker.proc.pid in closed, report  # the Celery worker (runworker execs it in place)
    leaked = [t for t in report if t.startswith("READABLE") and ("DATABASE_URL" in t or "REDIS_URL" in t)]
    assert not leaked, leaked
