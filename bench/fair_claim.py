"""Cost of one fair claim (``claim_next``) as the queue grows: 100 vs 10,000 queued jobs from 10 users.

Each claim is the real call against the database (no Celery): it reads the pool's usage, seeks
each queued owner's best job and claims one. Reports the median (and all samples) of the claim's
wall time and its query count at each depth. SQLite in a temporary directory by default;
``--database postgres://postgres@127.0.0.1:5432/bench_fair`` runs against PostgreSQL (the
database is created if missing and only the bench's own rows are deleted).

    .venv/bin/python bench/fair_claim.py [--depths 100 10000] [--users 10] [--repeat 7] [--database URL]
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
SPEC = {"name": "b", "data": {"dataset": "iris"}, "model": {"name": "logreg"}, "train": {"epochs": 1}}


def create_database(url: str) -> None:
    """CREATE DATABASE for a PostgreSQL URL if it does not exist (never touches another database)."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def setup(database: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="trainhub-bench-fair-"))
    os.environ.update({"TRAINHUB_VAR_DIR": str(tmp), "DJANGO_SETTINGS_MODULE": "trainhub.settings"})
    if database:
        create_database(database)
        os.environ["DATABASE_URL"] = database
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    import django

    django.setup()


def fill(depth: int, users: int):
    """A fresh pool with ``depth`` queued jobs spread over ``users`` owners (mixed priorities)."""
    from django.contrib.auth import get_user_model

    from trainhub.jobs.models import Job
    from trainhub.pools.models import Worker, WorkerPool
    from workers.runner.config import parse_spec

    Job.objects.filter(pool__name="bench-fair").delete()  # the bench's own rows only
    WorkerPool.objects.filter(name="bench-fair").delete()
    pool = WorkerPool.objects.create(name="bench-fair", queue="bench-fair", slots_per_worker=1000)
    Worker.objects.update_or_create(hostname="bench-fair@bench", defaults={"pool": pool, "threads": 1000})
    owners = [get_user_model().objects.get_or_create(username=f"bench-fair-{i}")[0] for i in range(users)]
    spec = parse_spec({**SPEC, "pool": pool.name}).to_dict()
    Job.objects.bulk_create([Job(owner=owners[i % users], name="b", mode="centralized", spec=spec, pool=pool,
                                 priority=i % 3) for i in range(depth)], batch_size=1000)
    return Job.objects.filter(pool=pool, status="queued").order_by("-id").values_list("id", flat=True).first()


def measure(depth: int, users: int, repeat: int) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from trainhub.runs.scheduling import claim_next

    hint = fill(depth, users)
    times, queries = [], []
    for _ in range(repeat + 1):  # the first claim warms caches and is dropped
        with CaptureQueriesContext(connection) as seen:
            start = time.perf_counter()
            decision = claim_next(hint, 1, hostname="bench-fair@bench")
            times.append((time.perf_counter() - start) * 1000)
        assert decision.job is not None and decision.job.pk != hint, decision
        queries.append(len(seen))
    times, queries = times[1:], queries[1:]
    return {"depth": depth, "users": users, "median_ms": round(statistics.median(times), 2),
            "samples_ms": [round(t, 2) for t in times], "queries": queries}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--depths", type=int, nargs="+", default=[100, 10_000])
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--database", default="", help="a PostgreSQL URL; default: SQLite in a temp dir")
    args = parser.parse_args()
    setup(args.database)
    rows = [measure(depth, args.users, args.repeat) for depth in args.depths]
    for row in rows:
        print(f"{row['depth']:>6} queued, {row['users']} users: median {row['median_ms']} ms/claim, "
              f"{row['queries'][0]} queries")
    from bench.record import write

    write("fair_claim", {"rows": rows}, database="postgresql" if args.database else "")


if __name__ == "__main__":
    main()
