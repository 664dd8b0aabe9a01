"""The job list with 100,000 jobs: server time and query count per page, for the pages people
use — the first page, filters, name search, a deep keyset page, oldest first, the live-rows
fragment htmx polls — as a user who owns a tenth of the jobs and as staff who sees them all.

    .venv/bin/python bench/job_list.py [--jobs 100000] [--runs 15]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/python bench/job_list.py

Builds its own database (a private SQLite file, or a fresh ``trainhub_bench_joblist`` database
on the PostgreSQL server of DATABASE_URL). Times are the Django test client's request round
trip in-process (URL resolution, view, queries, template), no network; query counts from
``CaptureQueriesContext``. Prints a Markdown table for docs/BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.log_common import fresh_postgres  # noqa: E402

BENCH_DB = "trainhub_bench_joblist"


def prepare_environment() -> str:
    """A database of the bench's own; returns what it is, for the table."""
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith("postgres"):
        os.environ["DATABASE_URL"] = fresh_postgres(url, BENCH_DB)
        kind = "PostgreSQL"
    else:
        kind = "SQLite (WAL)"
    os.environ["TRAINHUB_VAR_DIR"] = tempfile.mkdtemp(prefix="trainhub-joblist-")
    os.environ["DJANGO_SETTINGS_MODULE"] = "trainhub.settings"
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    return kind


def fill(n: int, seed: int = 0) -> tuple[object, object]:
    """``n`` jobs over 10 users, 3 pools, every mode and status; returns (a user, staff)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from trainhub.jobs.models import Job, Status
    from trainhub.pools.models import WorkerPool
    from workers.runner.config import MODES

    rng = random.Random(seed)
    users = [get_user_model().objects.create_user(f"user{i}", password="bench-password-1") for i in range(10)]
    staff = get_user_model().objects.create_user("staff", password="bench-password-1", is_staff=True)
    pools = [WorkerPool.objects.get_or_create(name=name, defaults={"kind": kind, "queue": name})[0]
             for name, kind in (("cpu", "cpu"), ("gpu", "gpu"), ("big", "gpu"))]
    # most jobs are finished, as on a dashboard that has been used for a while
    statuses = [Status.SUCCEEDED] * 70 + [Status.FAILED] * 15 + [Status.CANCELLED] * 10 + \
               [Status.QUEUED] * 3 + [Status.RUNNING] * 2
    words = ["resnet", "gpt", "llama", "sweep", "digits", "lora", "ddp", "baseline", "ablation", "tune"]
    now = timezone.now()
    batch = []
    for i in range(n):
        status = rng.choice(statuses)
        batch.append(Job(owner=rng.choice(users), name=f"{rng.choice(words)}-{rng.choice(words)}-{i}",
                         mode=rng.choice(MODES), spec={"name": "x"}, pool=rng.choice(pools), status=status,
                         step=rng.randrange(1000), total_steps=1000, created_at=now, started_at=now,
                         finished_at=now if status in ("succeeded", "failed", "cancelled") else None))
        if len(batch) == 5000:
            Job.objects.bulk_create(batch)
            batch = []
    Job.objects.bulk_create(batch)
    return users[0], staff


def measure(client, url: str, runs: int, headers: dict | None = None) -> tuple[float, float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    times = []
    for _ in range(runs):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.get(url, **(headers or {}))
            times.append(time.perf_counter() - started)
        assert response.status_code == 200, (url, response.status_code)
    return statistics.median(times) * 1000, max(times) * 1000, len(queries)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=15)
    ns = parser.parse_args()
    kind = prepare_environment()
    import django

    django.setup()
    from django.test import Client

    from trainhub.jobs.models import Job

    started = time.perf_counter()
    user, staff = fill(ns.jobs)
    print(f"{ns.jobs:,} jobs created in {time.perf_counter() - started:.0f} s on {kind}", file=sys.stderr)
    deep = Job.objects.filter(owner=user).order_by("-pk").values_list("pk", flat=True)[ns.jobs // 20]
    staff_deep = Job.objects.order_by("-pk").values_list("pk", flat=True)[ns.jobs // 2]
    htmx = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "job-rows"}
    pages = [
        ("user", "first page", "/", None),
        ("user", "status = running", "/?status=running", None),
        ("user", "mode + pool", "/?mode=ddp&pool=gpu", None),
        ("user", "name search", "/?q=lora-sweep", None),
        ("user", "a keyset page ~5,000 rows deep", f"/?before={deep}", None),
        ("user", "oldest first", "/?sort=oldest", None),
        ("user", "live rows (htmx poll)", "/", htmx),
        ("staff", "first page (all users' jobs)", "/", None),
        ("staff", "owner filter", "/?owner=user3", None),
        ("staff", "status = queued", "/?status=queued", None),
        ("staff", "name search, rare", "/?q=ablation-tune-99", None),
        ("staff", "a keyset page half way down", f"/?before={staff_deep}", None),
    ]
    clients = {"user": Client(), "staff": Client()}
    clients["user"].force_login(user)
    clients["staff"].force_login(staff)
    print("| who | page | server time p50 | max | queries |")
    print("| --- | --- | --- | --- | --- |")
    for who, label, url, headers in pages:
        clients[who].get(url, **(headers or {}))  # warm: templates, connection
        p50, worst, queries = measure(clients[who], url, ns.runs, headers)
        print(f"| {who} | {label} (`{url.split('before=')[0]}{'before=…' if 'before=' in url else ''}`) | "
              f"{p50:.1f} ms | {worst:.1f} ms | {queries} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
