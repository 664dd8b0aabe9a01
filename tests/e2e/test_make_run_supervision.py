"""`make run` supervises what it started: a SIGKILLed worker or embedded Redis is restarted with
backoff and said so in its output, the dashboard answers throughout, the interrupted job resumes
and succeeds, and a job submitted after Redis came back succeeds too."""
from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import ROOT, wait_for, wait_for_checkpoints
from tests.e2e.test_make_run import Up, answers, make_up_env
from trainhub.pools.management.commands.up import Backoff, Command

pytestmark = [pytest.mark.slow, pytest.mark.no_db]
FAST_LEASES = {"TRAINHUB_LEASE_SECONDS": "5", "TRAINHUB_HEARTBEAT_SECONDS": "1", "TRAINHUB_GRACE_SECONDS": "1"}


def test_the_restart_delay_doubles_up_to_30_s_and_starts_over_after_a_stable_minute():
    backoff = Backoff()
    assert [backoff.after_crash(uptime=2) for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert backoff.crashes == 7
    assert backoff.after_crash(uptime=61) == 1
    assert (backoff.crashes, backoff.after_crash(uptime=5)) == (1, 2)


def test_a_crashed_child_is_restarted_after_its_backoff_and_a_web_crash_loop_stops_everything():
    err = io.StringIO()
    up = Command(stdout=io.StringIO(), stderr=err)
    up.children = []
    crash = [sys.executable, "-c", "raise SystemExit(3)"]
    up._spawn("worker", crash, dict(os.environ))
    worker = up.children[0]
    worker.proc.wait()
    up._supervise(worker)
    assert "worker exited with code 3; restarting in 1 s" in err.getvalue()
    dead = worker.proc
    up._supervise(worker)
    assert worker.proc is dead  # not before its backoff has passed
    worker.restart_at = time.monotonic()
    up._supervise(worker)
    assert worker.proc is not dead and f"worker restarted (pid {worker.proc.pid})" in err.getvalue()

    up._spawn("web", crash, dict(os.environ), give_up_after=3)
    web = up.children[1]
    for _ in range(2):
        web.proc.wait()
        up._supervise(web)
        web.restart_at = time.monotonic()
        up._supervise(web)
    web.proc.wait()
    with pytest.raises(KeyboardInterrupt):
        up._supervise(web)
    assert "web exited with code 3 3 times in a row; stopping everything" in err.getvalue()
    assert "web exited with code 3; restarting in 2 s" in err.getvalue()
    worker.proc.wait()


def child(up: Up, word: str) -> psutil.Process | None:
    """The process `up` started directly whose command line has ``word``."""
    try:
        kids = psutil.Process(up.proc.pid).children()
    except psutil.NoSuchProcess:
        return None
    for proc in kids:
        try:
            if word in " ".join(proc.cmdline()):
                return proc
        except psutil.Error:  # a killed child is a zombie until `up` notices it
            continue
    return None


def finished(api: httpx.Client, job_id: int, base: str, timeout: float) -> dict:
    def done():
        assert answers(base + "/login"), "the dashboard stopped answering"
        job = api.get(f"/api/jobs/{job_id}").json()
        return job["status"] in ("succeeded", "failed", "cancelled") and job

    return wait_for(done, timeout=timeout, interval=1, message=f"job {job_id} to finish")


def replaced(up: Up, word: str, old_pid: int, base: str) -> psutil.Process:
    def new_one():
        assert answers(base + "/login"), "the dashboard stopped answering"
        proc = child(up, word)
        return proc if proc and proc.pid != old_pid else None

    return wait_for(new_one, timeout=60, interval=0.5, message=f"a new {word} process")


def test_make_run_restarts_a_killed_worker_and_redis_while_the_dashboard_keeps_serving(tmp_path):
    # short leases: the restarted worker's heartbeat finds the dead one's lease expired soon
    up_env = {**make_up_env(tmp_path), **FAST_LEASES}
    base = f"http://127.0.0.1:{up_env['TRAINHUB_PORT']}"
    up = Up(up_env, tmp_path / "up.log")
    try:
        wait_for(lambda: answers(base + "/login"), timeout=120, message="the dashboard to answer")
        token = subprocess.run([sys.executable, "manage.py", "issue_token", "admin"], cwd=ROOT, env=up_env,
                               capture_output=True, text=True, check=True).stdout.strip()
        api = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        created = api.post("/api/jobs", json={  # max_restarts 0 (the form's default): a lost worker is no failure
            "name": "survivor", "max_restarts": 0, "data": {"dataset": "synthetic", "samples": 20000},
            "train": {"epochs": 4}, "checkpoint": {"every_steps": 50}})
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        wait_for_checkpoints(Path(up_env["TRAINHUB_VAR_DIR"]) / "runs", job_id, timeout=180)

        worker = child(up, "celery")
        worker.kill()
        replaced(up, "celery", worker.pid, base)
        assert "worker exited with code -9; restarting in 1 s" in up.output(), up.output()
        job = finished(api, job_id, base, timeout=240)
        assert (job["status"], job["attempt"]) == ("succeeded", 2), job
        with sqlite3.connect(Path(up_env["TRAINHUB_VAR_DIR"]) / "trainhub.sqlite3") as db:
            back = db.execute("SELECT reason FROM jobs_jobevent WHERE job_id = ? AND old = 'running' "
                              "AND new = 'queued'", (job_id,)).fetchall()
        assert len(back) == 1 and back[0][0].startswith("interrupted: worker lost ("), back

        redis = child(up, "redis-server")
        redis.kill()
        replaced(up, "redis-server", redis.pid, base)
        assert "redis exited with code -9; restarting in 1 s" in up.output(), up.output()
        time.sleep(1)  # let the worker's broker connection notice and reconnect
        after = api.post("/api/jobs", json={"name": "after-redis", "data": {"dataset": "iris"},
                                            "model": {"name": "logreg"}, "train": {"epochs": 1}})
        assert after.status_code == 201, after.text
        job = finished(api, after.json()["id"], base, timeout=180)
        assert job["status"] == "succeeded", job

        started = up.family()
        up.proc.send_signal(signal.SIGINT)  # Ctrl-C still stops everything
        assert up.proc.wait(30) == 0
    finally:
        up.kill()
    wait_for(lambda: not [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE],
             timeout=20, message="every process `make run` started to stop")
