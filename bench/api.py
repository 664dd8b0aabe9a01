"""The REST API as a user's client meets it, for benchmarks that submit jobs: a dashboard of the
bench's own (``Dashboard``: var dir, Redis, database, a pool and its Celery worker), a uvicorn server
and an httpx client holding a real API token (``Authorization: Bearer``), so a submit goes through
HTTP, authentication and spec validation like ``curl -X POST /api/jobs``."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class Dashboard:
    """A dashboard of a bench's own, as ``make run`` sets one up: a var dir (``tmp``), a Redis, a migrated
    SQLite database, the ``cpu`` pool (its sandbox as given), a user and a Celery worker of that pool, in
    this process's environment plus ``env_extra`` (``env``; Django is set up in this process too)."""

    def __init__(self, prefix: str, *, sandbox: str, env_extra: dict[str, str] | None = None):
        self.prefix, self.sandbox, self.env_extra = prefix, sandbox, dict(env_extra or {})

    def __enter__(self) -> "Dashboard":
        from tests.conftest import RedisServer

        self.tmp = Path(tempfile.mkdtemp(prefix=self.prefix))
        self.redis = RedisServer(self.tmp)
        self.redis.start()
        self.env = {**os.environ, "TRAINHUB_VAR_DIR": str(self.tmp), "REDIS_URL": self.redis.url,
                    "DJANGO_SETTINGS_MODULE": "trainhub.settings", **self.env_extra}
        os.environ.update(self.env)
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=self.env, check=True)
        import django

        django.setup()
        from django.contrib.auth import get_user_model

        from trainhub.pools.models import WorkerPool

        WorkerPool.objects.update_or_create(name="cpu", defaults={"kind": "cpu", "queue": "cpu", "sandbox": self.sandbox})
        self.user = get_user_model().objects.create_user("bench", password="bench-password")
        # runworker execs celery: the Popen's pid is the worker's
        self.worker = subprocess.Popen([sys.executable, "manage.py", "runworker", "--pool", "cpu", "--loglevel", "WARNING"],
                                       cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       start_new_session=True)
        return self

    def __exit__(self, *exc) -> None:
        os.killpg(self.worker.pid, 15)
        self.worker.wait(30)
        self.redis.stop()


class Web:
    def __init__(self, env: dict, user, log: Path):
        self.env, self.user, self.log = env, user, log

    def __enter__(self) -> "Web":
        import httpx

        from tests.conftest import free_port
        from trainhub.api.models import ApiToken

        _, token = ApiToken.issue(self.user, name="bench")
        port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "trainhub.asgi:application", "--port", str(port),
                                      "--log-level", "warning", "--no-access-log"], cwd=ROOT, env=self.env,
                                     stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60,
                                   headers={"Authorization": f"Bearer {token}"})
        for _ in range(300):
            try:
                self.client.get("/api/jobs").raise_for_status()
                return self
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError(f"uvicorn did not start (see {self.log})")

    def submit(self, spec: dict) -> int:
        """POST /api/jobs; the job's id (fails loudly on anything but 201)."""
        response = self.client.post("/api/jobs", json=spec)
        if response.status_code != 201:
            raise RuntimeError(f"submit failed: {response.status_code} {response.text[:300]}")
        return response.json()["id"]

    def run(self, spec: dict, *, every: float = 0.25, while_waiting=None, follow: bool = False):
        """Submit ``spec`` and wait for its final status, which must be ``succeeded``: (the job, the
        seconds from the request to the final status). The end is the job's ``finished_at`` as the worker
        recorded it, not the moment a look here saw it, so the looks can be rare: a query every 20 ms beside
        the job took CPU from its training (a 1 ms-step job on two OpenMP threads trained 7 % slower beside
        such a loop, docs/BENCHMARKS.md). ``while_waiting()`` is called at each look, every ``every``
        seconds (a bench's CPU sampling). ``follow``: read the job's log through the API once a second
        meanwhile, as ``trainhub logs -f`` does, so the worker stores it at a followed job's pace."""
        from trainhub.jobs.models import Job

        started = time.time()  # the wall clock, as finished_at's
        pk = self.submit(spec)
        after, read_at = -1, 0.0
        while Job.objects.filter(pk=pk, status__in=["queued", "running", "cancelling"]).exists():
            if while_waiting is not None:
                while_waiting()
            if follow and time.monotonic() - read_at >= 1.0:
                read_at = time.monotonic()
                after = self.client.get(f"/api/jobs/{pk}/logs", params={"after": after, "limit": 10000}).json()[
                    "next_after"]
            time.sleep(every)
        job = Job.objects.get(pk=pk)
        if job.status != "succeeded":
            raise RuntimeError(f"job {pk} ended {job.status}: {job.error}")
        return job, job.finished_at.timestamp() - started

    def __exit__(self, *exc) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(20)
