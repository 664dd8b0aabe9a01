"""Submit -> running and submit -> first log line latency, median over N jobs.

Runs the real path: a Redis server of its own, a real Celery worker (`manage.py runworker`),
jobs submitted through the REST API of a uvicorn server, times read from the job's
JobEvents and first LogLine. Printed beside the time of a bare `python -c "import torch"`.

    .venv/bin/python bench/submit_latency.py [--jobs 20]
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="trainhub-bench-"))
    from tests.conftest import RedisServer, free_port

    redis = RedisServer(tmp)
    redis.start()
    env = {**os.environ, "TRAINHUB_VAR_DIR": str(tmp), "REDIS_URL": redis.url, "DJANGO_SETTINGS_MODULE": "trainhub.settings"}
    os.environ.update(env)
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from trainhub.api.models import ApiToken
    from trainhub.jobs.models import Job, JobEvent, LogLine
    from trainhub.pools.models import WorkerPool

    WorkerPool.objects.get_or_create(name="cpu", defaults={"kind": "cpu", "queue": "cpu"})
    user = get_user_model().objects.create_user("bench", password="bench-password")
    _, token = ApiToken.issue(user)
    port = free_port()
    web = subprocess.Popen([py, "-m", "uvicorn", "trainhub.asgi:application", "--port", str(port), "--log-level",
                            "warning"], cwd=ROOT, env=env)
    worker = subprocess.Popen([py, "manage.py", "runworker", "--pool", "cpu", "--loglevel", "WARNING"], cwd=ROOT,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    import httpx

    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"})
        for _ in range(100):
            try:
                client.get("/api/jobs")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        time.sleep(3)  # let the worker connect
        to_running, to_first_line = [], []
        for i in range(args.jobs):
            spec = {"name": f"bench-{i}", "data": {"dataset": "iris"}, "model": {"name": "logreg"},
                    "train": {"epochs": 1}}
            job_id = client.post("/api/jobs", json=spec).json()["id"]
            while Job.objects.get(pk=job_id).status not in ("succeeded", "failed"):
                time.sleep(0.05)
            job = Job.objects.get(pk=job_id)
            submitted = JobEvent.objects.get(job=job, new="queued").at
            running = JobEvent.objects.get(job=job, new="running").at
            first = LogLine.objects.filter(job=job, stream="o").order_by("seq").first().at
            to_running.append((running - submitted).total_seconds())
            to_first_line.append((first - submitted).total_seconds())
        t0 = time.perf_counter()
        subprocess.run([py, "-c", "import torch"], check=True)
        import_torch = time.perf_counter() - t0
    finally:
        web.terminate()
        os.killpg(worker.pid, 15)
        worker.wait(30)
        web.wait(10)
        redis.stop()
    print(f"| jobs | submit → running (median) | submit → first runner log line (median) | bare `import torch` |")
    print("| --- | --- | --- | --- |")
    print(f"| {args.jobs} | {statistics.median(to_running) * 1000:.0f} ms | "
          f"{statistics.median(to_first_line) * 1000:.0f} ms | {import_torch * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
