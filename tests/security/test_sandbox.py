"""A job in the pool's bubblewrap sandbox (``workers.sandbox``) cannot read the database in var/,
another job's run directory, the worker's secrets or a GPU it was not leased; cannot write outside
its run directory or reach 127.0.0.1; and can still write its own run directory and /tmp. The same
probes get through on a pool whose sandbox is off, which shows that each probe would notice a leak.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.conftest import wait_for

#: tries each thing a job must not do; prints ``PROBE name OPEN|SHUT detail``
PROBE = """
import os, socket, sys
db, other, fake_dev, workspace, redis_port = sys.argv[1:6]
leased = int(os.environ["CUDA_VISIBLE_DEVICES"])
def probe(name, fn):
    try:
        detail = fn()
        print("PROBE", name, "OPEN", detail, flush=True)
    except Exception as exc:
        print("PROBE", name, "SHUT", type(exc).__name__, flush=True)
def read(path):
    with open(path, "rb") as fh:
        return len(fh.read())
def write(path):
    with open(path, "w") as fh:
        fh.write("x")
    return path
def env(*names):
    found = [n for n in names if n in os.environ]
    if not found:
        raise LookupError("none")
    return found
probe("database", lambda: read(db))
probe("other_run_dir", lambda: read(other))
probe("worker_secrets", lambda: env("PGPASSWORD", "EMAIL_HOST_PASSWORD", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL"))
probe("unleased_gpu", lambda: [read(p) for p in (f"/dev/nvidia{1 - leased}", f"{fake_dev}/nvidia{1 - leased}")
                               if os.path.exists(p)] or read(f"/dev/nvidia{1 - leased}"))
probe("leased_gpu", lambda: read(f"/dev/nvidia{leased}"))
probe("write_workspace", lambda: write(os.path.join(workspace, "planted.py")))
probe("write_project", lambda: write(os.path.join(os.environ["PYTHONPATH"].split(":")[-1], "planted.py")))
probe("tcp_localhost", lambda: socket.create_connection(("127.0.0.1", int(redis_port)), timeout=3).close())
probe("own_run_dir", lambda: write(os.path.join(os.environ["TRAINHUB_RUN_DIR"], "mine.txt")))
probe("tmp", lambda: write("/tmp/scratch.txt"))
"""
SECRET_ENV = {"PGPASSWORD": "pg-secret", "EMAIL_HOST_PASSWORD": "mail-secret", "AWS_SECRET_ACCESS_KEY": "aws-secret"}
MUST_BE_SHUT = ("database", "other_run_dir", "worker_secrets", "unleased_gpu", "write_workspace", "write_project",
                "tcp_localhost")
MUST_BE_OPEN = ("own_run_dir", "tmp")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (apt-get install bubblewrap)")


def test_the_bwrap_argv_hides_runs_and_var_binds_the_run_dir_last_and_passes_only_allowed_env(tmp_path):
    from workers import sandbox

    (tmp_path / "runs").mkdir()
    (tmp_path / "var").mkdir()
    run_dir = tmp_path / "runs" / "job-7"
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        (dev / name).touch()
    plan = sandbox.Plan(run_dir=run_dir, cwd=run_dir, project=Path("/srv/trainhub"), gpus=(1,), device_dir=dev,
                        env={"PATH": "/usr/bin", "DATABASE_URL": "sqlite:///x", "PGPASSWORD": "p", "RANK": "0",
                             "AWS_ACCESS_KEY_ID": "a", "TRAINHUB_RUN_DIR": str(run_dir), "NCCL_DEBUG": "INFO",
                             "TRAINHUB_SECRET_KEY": "k", "REDIS_URL": "redis://"},
                        hidden=(tmp_path / "runs", tmp_path / "var", tmp_path / "missing"))
    argv = sandbox.argv(plan)
    joined = " ".join(argv)
    assert argv[-3:] == ["--", "env", "--default-signal=TERM"]
    assert "--unshare-net" in argv and "--unshare-pid" in argv and "--die-with-parent" in argv
    assert joined.index(f"--tmpfs {tmp_path}/runs") < joined.index(f"--bind {run_dir} {run_dir}")
    assert f"--tmpfs {tmp_path}/var" in joined and "missing" not in joined
    assert f"--dev-bind-try {dev}/nvidia1 /dev/nvidia1" in joined and "nvidia0" not in joined
    assert f"--dev-bind-try {dev}/nvidiactl /dev/nvidiactl" in joined
    names = {argv[i + 1] for i, a in enumerate(argv) if a == "--setenv"}
    assert names == {"PATH", "RANK", "TRAINHUB_RUN_DIR", "NCCL_DEBUG", "HOME"}
    assert "--unshare-net" not in sandbox.argv(plan.__class__(**{**plan.__dict__, "network": True}))
    # a project (and its .venv) cloned under /tmp, as a CI run may: the private /tmp must not cover it
    in_tmp = sandbox.argv(plan.__class__(**{**plan.__dict__, "project": tmp_path / "clone"}))
    assert " ".join(in_tmp).index("--tmpfs /tmp ") < " ".join(in_tmp).index(f"--ro-bind-try {tmp_path}/clone ")


def run_probe(start_worker, user, tmp_path, live_settings, *, sandbox: str) -> dict[str, str]:
    """Run ``PROBE`` as a one-GPU script job on a pool with ``sandbox``; its ``{probe: OPEN|SHUT}`` and log."""
    from django.conf import settings

    from trainhub.jobs import logs
    from trainhub.jobs.models import Job
    from trainhub.jobs.services import job_submit
    from trainhub.pools.models import WorkerPool, Workspace

    workspace = tmp_path / "probe"
    workspace.mkdir()
    (workspace / "probe.py").write_text(PROBE)
    Workspace.objects.create(name="probe", path=str(workspace))
    dev = tmp_path / "fake-dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1"):
        (dev / name).write_text("a GPU")
    other = Path(settings.TRAINHUB_RUNS_DIR) / "job-9999" / "secret.txt"
    other.parent.mkdir(parents=True)
    other.write_text("another job's weights")
    from django.db import connection

    if connection.vendor == "sqlite":
        database = settings.DATABASES["default"]["NAME"]
    else:  # PostgreSQL keeps no file in var/; what var/ holds (the secret key) must stay hidden all the same
        Path(settings.VAR_DIR).mkdir(parents=True, exist_ok=True)
        database = str(Path(settings.VAR_DIR) / "sandbox-probe.txt")
        Path(database).write_text("what var/ holds")
    assert Path(database).is_relative_to(settings.VAR_DIR) and Path(database).exists()
    WorkerPool.objects.create(name="gpu", kind="gpu", queue="gpu", sandbox=sandbox)
    start_worker("gpu", extra_env={"TRAINHUB_FAKE_GPUS": "2", "TRAINHUB_DEVICE_DIR": str(dev), **SECRET_ENV})
    port = str(urlparse(live_settings.REDIS_URL).port)
    job = job_submit(owner=user, data={
        "mode": "script", "pool": "gpu", "resources": {"gpus_per_node": 1},
        "script": {"workspace": "probe", "entry": "probe.py",
                   "args": [database, str(other), str(dev), str(workspace), port]}})
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=180, message="the probe job to finish")
    lines = [line.text for line in logs.read_lines(job.pk, limit=1000)]
    assert done.status == "succeeded", (done.error, lines[-20:])
    found = {t.split()[1]: t.split()[2] for t in lines if t.startswith("PROBE ")}
    return {"probes": found, "lines": lines, "run_dir": Path(settings.TRAINHUB_RUNS_DIR) / f"job-{job.pk}"}


@pytest.mark.slow
@pytest.mark.db_agnostic
@needs_bwrap
def test_a_sandboxed_job_reaches_nothing_but_its_run_dir_tmp_and_its_leased_gpu(start_worker, user, tmp_path,
                                                                                live_settings):
    result = run_probe(start_worker, user, tmp_path, live_settings, sandbox="required")
    probes = result["probes"]
    assert {name: probes.get(name) for name in MUST_BE_SHUT} == dict.fromkeys(MUST_BE_SHUT, "SHUT"), result["lines"]
    assert {name: probes.get(name) for name in MUST_BE_OPEN} == dict.fromkeys(MUST_BE_OPEN, "OPEN"), result["lines"]
    assert probes["leased_gpu"] == "OPEN", result["lines"]  # the lease's device node is there, and only it
    assert (result["run_dir"] / "mine.txt").exists()
    assert not (tmp_path / "probe" / "planted.py").exists()
    assert not any("running unsandboxed" in t for t in result["lines"])


@pytest.mark.slow
@pytest.mark.db_agnostic
def test_the_same_probes_get_through_on_a_pool_whose_sandbox_is_off_and_the_log_says_so(start_worker, user,
                                                                                        tmp_path, live_settings):
    result = run_probe(start_worker, user, tmp_path, live_settings, sandbox="off")
    probes = result["probes"]
    leaked = ("database", "other_run_dir", "worker_secrets", "unleased_gpu", "write_workspace", "tcp_localhost")
    assert {name: probes.get(name) for name in leaked} == dict.fromkeys(leaked, "OPEN"), result["lines"]
    assert "trainhub: running unsandboxed (pool setting)" in result["lines"]
    (tmp_path / "probe" / "planted.py").unlink()
    from workers.runner.launch import REPO_ROOT

    (REPO_ROOT / "planted.py").unlink(missing_ok=True)  # unsandboxed, the probe could write into the project


@pytest.mark.slow
@pytest.mark.db_agnostic
def test_a_required_sandbox_on_a_worker_without_bwrap_fails_the_job_saying_how_to_fix_it(start_worker, user,
                                                                                         tmp_path):
    from trainhub.jobs.models import Job
    from trainhub.jobs.services import job_submit
    from trainhub.pools.models import WorkerPool

    WorkerPool.objects.create(name="strict", queue="strict", sandbox="required")
    no_bwrap = tmp_path / "bin"
    no_bwrap.mkdir()
    start_worker("strict", extra_env={"PATH": str(no_bwrap)})
    job = job_submit(owner=user, data={"name": "strict", "pool": "strict", "train": {"epochs": 1}})
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=120, message="the job to fail")
    assert done.status == "failed"
    assert "apt-get install bubblewrap, or set the pool's sandbox to off" in done.error, done.error


def test_a_new_pool_sandboxes_its_jobs_where_bwrap_is_installed(db):
    from trainhub.pools.models import WorkerPool

    pool = WorkerPool.objects.create(name="fresh", queue="fresh")
    assert pool.sandbox == ("required" if shutil.which("bwrap") else "off")
    assert pool.sandbox_network is False


def sandboxed_start(tmp_path, code: str):
    """``code`` through the local backend in a sandbox, as the executor starts a job."""
    import sys

    from workers import backends

    run_dir = tmp_path / "runs" / "job-1"
    run_dir.mkdir(parents=True)
    request = backends.RunRequest(argv=[sys.executable, "-c", code], env={**os.environ}, cwd=run_dir,
                                  run_dir=run_dir, job_id=1, attempt=1, sandbox="required")
    return backends.get("local").start(request)


def wait_for_exit(handle, seconds: float = 60) -> int:
    code = wait_for(lambda: (handle.poll(),), timeout=seconds, interval=0.05, message="the run to end")[0]
    while code is None:
        code = wait_for(lambda: (handle.poll(),), timeout=seconds, interval=0.05, message="the run to end")[0]
    return code


def texts(handle) -> list[str]:
    return [text for _, items in handle.lines() for _, text in items]


@pytest.mark.slow
@pytest.mark.db_agnostic
@needs_bwrap
def test_a_cancelled_sandboxed_run_gets_sigterm_keeps_its_last_words_and_leaves_no_process(tmp_path):
    import psutil

    # a grandchild in a session of its own, which a process-group signal alone would miss
    code = ("import signal, subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)  # sandbox-orphan'],"
            " start_new_session=True)\n"
            "def bye(*_):\n    print('checkpoint saved', flush=True); sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, bye)\nprint('up', flush=True)\ntime.sleep(120)")
    handle = sandboxed_start(tmp_path, code)
    seen: list[str] = []
    wait_for(lambda: seen.extend(texts(handle)) or "up" in seen, timeout=60, message="the run to start")
    handle.cancel(grace=20)
    assert wait_for_exit(handle) == 0
    handle.close(5)
    assert texts(handle) == ["checkpoint saved"]
    wait_for(lambda: not [p for p in psutil.process_iter(["cmdline"])
                          if "sandbox-orphan" in " ".join(p.info["cmdline"] or [])],
             timeout=10, message="the sandbox's last process to die with it")


@pytest.mark.slow
@pytest.mark.db_agnostic
@needs_bwrap
def test_a_sandboxed_run_killed_by_a_signal_is_reported_as_killed_not_as_exit_code_137(tmp_path):
    handle = sandboxed_start(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert wait_for_exit(handle) == -9
    handle.close(5)
