"""Scheduling throughput and latency: N short jobs submitted at once to a pool of two workers.

The real path: a Redis server of its own, two real Celery workers (`manage.py runworker`),
jobs submitted through ``job_submit`` all at once; each job is a real (tiny) Python process
(script mode, an empty script). Reports jobs/s completed (first submit → last finish), p50/p95
submit → running (from the JobEvents), and the server time of the job list and the pool page
(Django test client, staff user) sampled while the queue drains.

    .venv/bin/python bench/scheduling.py [--jobs 200] [--slots 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--slots", type=int, default=2, help="job slots per worker")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="trainhub-bench-sched-"))
    from tests.conftest import RedisServer

    redis = RedisServer(tmp)
    redis.start()
    env = {**os.environ, "TRAINHUB_VAR_DIR": str(tmp), "REDIS_URL": redis.url,
           "DJANGO_SETTINGS_MODULE": "trainhub.settings", "TRAINHUB_ALLOWED_HOSTS": "testserver"}
    os.environ.update(env)
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.test import Client

    from trainhub.jobs.models import Job, JobEvent
    from trainhub.jobs.services import job_submit
    from trainhub.pools.models import Worker, WorkerPool, Workspace

    code = tmp / "code"
    code.mkdir()
    (code / "noop.py").write_text("")
    Workspace.objects.create(name="noop", path=str(code))
    WorkerPool.objects.create(name="bench", queue="bench", slots_per_worker=args.slots)
    user = get_user_model().objects.create_user("bench", is_staff=True, is_superuser=True)
    web = Client()
    web.force_login(user)
    workers = [subprocess.Popen([py, "manage.py", "runworker", "--pool", "bench", "--slots", str(args.slots),
                                 "--name", f"bench{i}@bench", "--loglevel", "WARNING"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
               for i in range(2)]
    page_ms: dict[str, list[float]] = {"/": [], "/pools/bench": []}
    try:
        deadline = time.monotonic() + 60
        while Worker.objects.filter(pool__name="bench").count() < 2:
            assert time.monotonic() < deadline, "workers did not register"
            time.sleep(0.2)
        spec = {"name": "noop", "mode": "script", "pool": "bench", "script": {"workspace": "noop", "entry": "noop.py"}}
        t0 = time.perf_counter()
        ids = [job_submit(owner=user, data=spec).pk for _ in range(args.jobs)]
        submitted_s = time.perf_counter() - t0
        while Job.objects.filter(pk__in=ids, status__in=["queued", "running"]).exists():
            for url in page_ms:
                start = time.perf_counter()
                assert web.get(url).status_code == 200
                page_ms[url].append((time.perf_counter() - start) * 1000)
            time.sleep(0.5)
        jobs = Job.objects.filter(pk__in=ids)
        failed = jobs.exclude(status="succeeded").count()
        first = JobEvent.objects.filter(job__in=ids, new="queued", old="").order_by("at").first().at
        last = max(j.finished_at for j in jobs)
        queued = dict(JobEvent.objects.filter(job__in=ids, new="queued", old="").values_list("job_id", "at"))
        running = dict(JobEvent.objects.filter(job__in=ids, new="running").values_list("job_id", "at"))
        waits = [(running[i] - queued[i]).total_seconds() for i in ids]
        per_worker = {w: jobs.filter(worker__hostname=w).count() for w in ("bench0@bench", "bench1@bench")}
    finally:
        for worker in workers:
            os.killpg(worker.pid, 15)
        for worker in workers:
            worker.wait(60)
        redis.stop()
    span = (last - first).total_seconds()
    print(f"{args.jobs} jobs, 2 workers × {args.slots} slots, submitted in {submitted_s:.1f} s; failed: {failed}; "
          f"per worker: {per_worker}")
    print("| jobs | workers × slots | completed/s | submit → running p50 | p95 | max | job list p50 / max | "
          "pool page p50 / max |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print(f"| {args.jobs} | 2 × {args.slots} | {args.jobs / span:.1f} | {pct(waits, 50):.1f} s | {pct(waits, 95):.1f} s "
          f"| {max(waits):.1f} s | {statistics.median(page_ms['/']):.0f} / {max(page_ms['/']):.0f} ms | "
          f"{statistics.median(page_ms['/pools/bench']):.0f} / {max(page_ms['/pools/bench']):.0f} ms |")


if __name__ == "__main__":
    main()
