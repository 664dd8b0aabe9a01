"""Submit -> running and submit -> first runner log line latency, median over N jobs.

Runs the real path: a Redis server of its own, a real Celery worker (`manage.py runworker`),
jobs submitted one after another through the REST API of a uvicorn server with an API token.
The clock starts when the client sends ``POST /api/jobs`` (so HTTP, authentication, spec
validation and the broker send are inside it) and stops at the job's ``running`` JobEvent and
at its first stored stdout line (the runner's first print). Printed beside the time of a bare
`python -c "import torch"`; raw samples under bench/results/ (bench/record.py).

    .venv/bin/python bench/submit_latency.py [--jobs 20]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_submit .venv/bin/python bench/submit_latency.py

Without ``DATABASE_URL`` the stack's database is a SQLite file of its own. With it, the database must exist; a
run adds its jobs to it and reuses the ``bench`` user and ``cpu`` pool an earlier run left (the figures in
docs/BENCHMARKS.md used a fresh database per run, dropped and created before each).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402
from bench.api import Web  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="trainhub-bench-"))
    from tests.conftest import RedisServer

    redis = RedisServer(tmp)
    redis.start()
    env = {**os.environ, "TRAINHUB_VAR_DIR": str(tmp), "REDIS_URL": redis.url, "DJANGO_SETTINGS_MODULE": "trainhub.settings"}
    os.environ.update(env)
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from django.db import connection

    from trainhub.jobs.models import Job, JobEvent, LogLine
    from trainhub.pools.models import WorkerPool

    WorkerPool.objects.get_or_create(name="cpu", defaults={"kind": "cpu", "queue": "cpu"})
    user = get_user_model().objects.filter(username="bench").first() or get_user_model().objects.create_user("bench")
    worker = subprocess.Popen([py, "manage.py", "runworker", "--pool", "cpu", "--loglevel", "WARNING"], cwd=ROOT,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    samples = []
    try:
        with Web(env, user, tmp / "web.log") as web:
            time.sleep(3)  # let the worker connect
            for i in range(args.jobs):
                spec = {"name": f"bench-{i}", "data": {"dataset": "iris"}, "model": {"name": "logreg"},
                        "train": {"epochs": 1}}
                requested = datetime.now(timezone.utc)  # the clock starts as the request is sent
                job_id = web.submit(spec)
                while Job.objects.get(pk=job_id).status not in ("succeeded", "failed"):
                    time.sleep(0.05)
                job = Job.objects.get(pk=job_id)
                assert job.status == "succeeded", job.error
                queued = JobEvent.objects.get(job=job, new="queued").at
                running = JobEvent.objects.get(job=job, new="running").at
                first = LogLine.objects.filter(job=job, stream="o").order_by("seq").first()
                samples.append({"job": job_id, "to_queued_s": (queued - requested).total_seconds(),
                                "to_running_s": (running - requested).total_seconds(),
                                "to_first_line_s": (first.at - requested).total_seconds(), "first_line": first.text})
            requests_ms = request_latency(web)
        t0 = time.perf_counter()
        subprocess.run([py, "-c", "import torch"], check=True)
        import_torch = time.perf_counter() - t0
    finally:
        os.killpg(worker.pid, 15)
        worker.wait(30)
        redis.stop()
    to_running = [s["to_running_s"] for s in samples]
    to_first_line = [s["to_first_line_s"] for s in samples]
    record.write("submit_latency", {
        "jobs": args.jobs, "clock": "from the client sending POST /api/jobs", "samples": samples,
        "median_to_running_ms": statistics.median(to_running) * 1000,
        # the request's own part (HTTP, authentication, validation, the row) and the queue's (broker, claim)
        "median_to_queued_ms": statistics.median(s["to_queued_s"] for s in samples) * 1000,
        "median_queued_to_running_ms": statistics.median(s["to_running_s"] - s["to_queued_s"] for s in samples) * 1000,
        "median_to_first_line_ms": statistics.median(to_first_line) * 1000, "import_torch_ms": import_torch * 1000,
        # the web server's database connections: TRAINHUB_DB_POOL_SIZE as the bench was started with (unset:
        # trainhub/asgi.py's default, a pool of 20 on PostgreSQL)
        "web_db_pool_size": os.environ.get("TRAINHUB_DB_POOL_SIZE", "unset"), "requests_ms": requests_ms,
        "median_request_ms": {name: statistics.median(times) for name, times in requests_ms.items()}},
        database=connection.vendor)
    print("| jobs | submit → running (median) | of it: request → queued / queued → running | submit → first runner log line (median) | bare `import torch` |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| {args.jobs} | {statistics.median(to_running) * 1000:.0f} ms | "
          f"{statistics.median(s['to_queued_s'] for s in samples) * 1000:.0f} / "
          f"{statistics.median(s['to_running_s'] - s['to_queued_s'] for s in samples) * 1000:.0f} ms | "
          f"{statistics.median(to_first_line) * 1000:.0f} ms | {import_torch * 1000:.0f} ms |")
    print("median request: " + ", ".join(f"{name} {statistics.median(t):.1f} ms" for name, t in requests_ms.items()))


def request_latency(web, n: int = 30) -> dict[str, list[float]]:
    """Milliseconds of ``n`` API requests of each kind, alternating: a 404 for a job that does not exist
    (the token check and one query) and the job list (the token check and a page of jobs)."""
    out: dict[str, list[float]] = {"job_404": [], "job_list": []}
    for _ in range(n):
        for name, path in (("job_404", "/api/jobs/999999999"), ("job_list", "/api/jobs")):
            t0 = time.perf_counter()
            web.client.get(path)
            out[name].append((time.perf_counter() - t0) * 1000)
    return out


if __name__ == "__main__":
    main()
