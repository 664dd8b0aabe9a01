"""Shared set-up for the live-log benchmarks: a private Redis, database, Celery worker and
uvicorn; jobs in script mode running ``bench/log_printer.py`` through the real executor.

The database is a SQLite file of the stack's own, or, when DATABASE_URL names a PostgreSQL server, a
fresh database ``trainhub_bench_stack`` on it (dropped and created at the start).

Not a test: the figures go to docs/BENCHMARKS.md ("Live logs").
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def fresh_postgres(url: str, name: str, reuse: bool = False) -> str:
    """The URL of database ``name`` on the PostgreSQL server of ``url``, dropped and created anew
    (``reuse``: kept when it exists)."""
    import psycopg

    base, _, _ = url.rpartition("/")
    with psycopg.connect(url, autocommit=True) as conn:
        if not reuse:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f"CREATE DATABASE {name}")
    return f"{base}/{name}"


class Stack:
    def __init__(self, web: bool = True, web_workers: int = 1, slots: int = 1):
        self.tmp = Path(tempfile.mkdtemp(prefix="trainhub-logbench-"))
        self.procs: list[subprocess.Popen] = []
        self.web = web
        self.web_workers = web_workers  # uvicorn --workers: server processes sharing the port
        self.slots = slots  # jobs the one worker runs at once

    def __enter__(self) -> "Stack":
        from tests.conftest import RedisServer, free_port

        url = os.environ.get("DATABASE_URL", "")
        self.database = "postgresql" if url.startswith("postgres") else "sqlite"
        if self.database == "postgresql":
            os.environ["DATABASE_URL"] = fresh_postgres(url, "trainhub_bench_stack")
        self.redis = RedisServer(self.tmp)
        self.redis.start()
        self.env = {**os.environ, "TRAINHUB_VAR_DIR": str(self.tmp), "REDIS_URL": self.redis.url,
                    "DJANGO_SETTINGS_MODULE": "trainhub.settings", "PYTHONUNBUFFERED": "1",
                    "TRAINHUB_RUNS_DIR": str(self.tmp / "runs"),
                    # one bench user stands for many viewers, and a flood must be stored whole to be counted
                    "TRAINHUB_SSE_MAX_PER_USER": "100000", "TRAINHUB_SSE_MAX_STREAMS": "100000",
                    "TRAINHUB_LOG_MAX_BYTES": "0"}
        os.environ.update(self.env)
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=self.env, check=True)
        import django

        django.setup()
        from django.contrib.auth import get_user_model

        from trainhub.pools.models import WorkerPool, Workspace

        WorkerPool.objects.update_or_create(name="cpu", defaults={"kind": "cpu", "queue": "cpu",
                                                                   "slots_per_worker": self.slots})
        Workspace.objects.get_or_create(name="logbench", defaults={"path": str(ROOT / "bench")})
        self.user = get_user_model().objects.create_user("bench", password="bench-password-1")
        self._spawn([sys.executable, "manage.py", "runworker", "--pool", "cpu", "--slots", str(self.slots)],
                    "worker.log")
        if self.web:
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self._spawn([sys.executable, "-m", "uvicorn", "trainhub.asgi:application", "--port", str(self.port),
                         "--log-level", "warning", "--no-access-log", "--workers", str(self.web_workers)], "web.log")
            self._wait_web()
        return self

    def _spawn(self, argv: list[str], log: str) -> None:
        self.procs.append(subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=open(self.tmp / log, "ab"),
                                           stderr=subprocess.STDOUT, start_new_session=True))

    def _wait_web(self) -> None:
        import httpx

        for _ in range(300):
            try:
                httpx.get(self.url + "/login", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("uvicorn did not start")

    def cookies(self) -> dict:
        from django.conf import settings
        from django.test import Client

        client = Client()
        client.force_login(self.user)
        return {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}

    def submit(self, *args: str, name: str = "logbench"):
        from trainhub.jobs.services import job_submit

        return job_submit(owner=self.user, data={"name": name, "mode": "script", "timeout_minutes": 60,
                                                 "script": {"workspace": "logbench", "entry": "log_printer.py",
                                                            "args": list(args)}})

    def wait_final(self, job_id: int, timeout: float = 1800):
        from trainhub.jobs.models import FINAL, Job

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = Job.objects.get(pk=job_id)
            if job.status in FINAL:
                return job
            time.sleep(0.2)
        raise RuntimeError(f"job {job_id} did not finish in {timeout}s")

    def __exit__(self, *exc) -> None:
        import signal

        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(20)
            except Exception:
                proc.kill()
        self.redis.stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]
