"""`make run` is `manage.py up`: on an empty var directory it migrates, creates the admin, starts
an embedded Redis, a worker and the web server; a job submitted through the REST API succeeds;
Ctrl-C (SIGINT) stops every process it started; a second start reuses what is there."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import psutil
import pytest

from tests.conftest import ROOT, free_port, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.no_db]
PASSWORD = "first-run-password-1"


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class Up:
    def __init__(self, env: dict, log):
        self.log = log
        # started with SIGINT ignored, as a shell's background job or a CI runner may start it:
        # Ctrl-C must still stop it (Python keeps an inherited SIG_IGN unless told otherwise)
        self.proc = subprocess.Popen([sys.executable, "manage.py", "up"], cwd=ROOT, env=env,
                                     stdout=open(log, "ab"), stderr=subprocess.STDOUT,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """After a failure: nothing it started may outlive the test (the children have sessions of their own)."""
        for proc in self.family() + [psutil.Process(self.proc.pid)] if self.proc.poll() is None else []:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass

    def family(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []


def family_cmdlines(up: Up) -> str:
    names = []
    for proc in up.family():
        try:
            names.append(" ".join(proc.cmdline()))
        except psutil.NoSuchProcess:
            pass
    return " ".join(names)


def make_up_env(tmp_path) -> dict:
    """The environment of a fresh `manage.py up`: its own var directory and ports, no Redis given."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "TRAINHUB_RUNS_DIR")}
    env.update(TRAINHUB_VAR_DIR=str(tmp_path / "var"), TRAINHUB_PORT=str(free_port()),
               TRAINHUB_EMBEDDED_REDIS_PORT=str(free_port()), TRAINHUB_ADMIN_PASSWORD=PASSWORD,
               PYTHONUNBUFFERED="1")
    return env


@pytest.fixture
def up_env(tmp_path):
    return make_up_env(tmp_path)


def test_make_run_brings_everything_up_runs_a_job_and_ctrl_c_stops_it_all(up_env, tmp_path):
    base = f"http://127.0.0.1:{up_env['TRAINHUB_PORT']}"
    first = Up(up_env, tmp_path / "up1.log")
    started = []
    try:
        wait_for(lambda: answers(base + "/login"), timeout=120, message="the dashboard to answer")
        assert "created admin user 'admin' with password: from TRAINHUB_ADMIN_PASSWORD" in first.output()
        # `runworker` becomes celery (exec) only after its own Django start and pool lookup, which can
        # finish after the web server answers on a loaded machine: wait for it rather than look once
        names = wait_for(lambda: "celery" in (n := family_cmdlines(first)) and "-Q cpu" in n and n,
                         timeout=60, message="the worker for the default CPU pool to start")
        assert "redis-server" in names, names  # the embedded one, since REDIS_URL is unset
        assert "uvicorn" in names, names
        token = subprocess.run([sys.executable, "manage.py", "issue_token", "admin"], cwd=ROOT, env=up_env,
                               capture_output=True, text=True, check=True).stdout.strip()
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        created = api.post("/api/jobs", json={"name": "first-run", "data": {"dataset": "iris"},
                                              "model": {"name": "logreg"}, "train": {"epochs": 1}})
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        job = wait_for(lambda: (j := api.get(f"/api/jobs/{job_id}").json())["status"] in
                       ("succeeded", "failed", "cancelled") and j, timeout=180, message="the job to finish")
        assert job["status"] == "succeeded", job
        started = first.family()
        first.proc.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal sends
        assert first.proc.wait(30) == 0
    finally:
        first.kill()
    wait_for(lambda: not [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE],
             timeout=20, message="every process `make run` started to stop")
    assert not answers(base + "/login")

    # same var directory: reuse, no new admin; a changed TRAINHUB_ADMIN_PASSWORD is said not to apply
    second = Up({**up_env, "TRAINHUB_ADMIN_PASSWORD": "changed-" + PASSWORD}, tmp_path / "up2.log")
    try:
        wait_for(lambda: answers(base + "/login"), timeout=120, message="the dashboard to answer again")
        assert "created admin user" not in second.output()
        assert "TRAINHUB_ADMIN_PASSWORD differs from the password of the existing 'admin' user" in second.output()
        jobs = api.get("/api/jobs").json()
        assert [j["name"] for j in jobs["items"]] == ["first-run"]
        second.proc.send_signal(signal.SIGTERM)
        assert second.proc.wait(30) == 0
    finally:
        second.kill()
