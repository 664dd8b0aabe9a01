"""Log search, "first error" and the job list's name search at scale, without and with the search
indexes (migration jobs/0005: pg_trgm GIN on PostgreSQL; SQLite has none), side by side in one run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/python bench/log_search.py
    .venv/bin/python bench/log_search.py --lines 1000000 --jobs 100000      # SQLite

Builds its own database (a fresh ``trainhub_bench_logsearch`` on the PostgreSQL server of
DATABASE_URL, or a private SQLite file), fills it server-side (one job with ``--lines`` lines, a
"RuntimeError" line at 90 %, beside ``--other-lines`` lines of four other jobs; ``--jobs`` jobs over
10 users for the name search), then times each request ``--runs`` times after a warm-up: first
with the indexes dropped ("before"), then with them built ("after"). Times are server time through
Django's test client in-process (URL → view → queries → template, no network), as in
bench/job_list.py. Also times storing 100,000 lines through ``logs.append_lines`` (the executor's
write) without and with the index: the index's cost on log throughput. Raw samples under
bench/results/ (bench/record.py).
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402

BENCH_DB = "trainhub_bench_logsearch"
INDEXES = importlib.import_module("trainhub.jobs.migrations.0005_log_and_name_search_indexes").INDEXES


def prepare_environment() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith("postgres"):
        import psycopg

        base, _, _ = url.rpartition("/")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
            conn.execute(f"CREATE DATABASE {BENCH_DB}")
        os.environ["DATABASE_URL"] = f"{base}/{BENCH_DB}"
    os.environ["TRAINHUB_VAR_DIR"] = tempfile.mkdtemp(prefix="trainhub-logsearch-")
    os.environ["DJANGO_SETTINGS_MODULE"] = "trainhub.settings"
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    import django

    django.setup()
    from django.db import connection

    return connection.vendor


def series(n: int, vendor: str) -> str:
    """A FROM clause giving ``g`` = 0 … n-1."""
    if vendor == "postgresql":
        return f"generate_series(0, {n - 1}) AS s(g)"
    return f"(WITH RECURSIVE r(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM r WHERE g < {n - 1}) SELECT g FROM r) AS s"


def fill_lines(cursor, vendor: str, job_id: int, n: int, error_at: int | None) -> None:
    error = f"WHEN g = {error_at} THEN 'RuntimeError: CUDA error: out of memory' " if error_at is not None else "WHEN false THEN NULL "
    now = "now()" if vendor == "postgresql" else "datetime('now')"
    cursor.execute(f"INSERT INTO jobs_logline (job_id, seq, rank, stream, text, at) "
                   f"SELECT {job_id}, g, g % 2, 'o', CASE {error}ELSE 'step ' || g || ' loss ' || "
                   f"round(1.0 / (g + 1), 6) || ' lr 0.001' END, {now} FROM {series(n, vendor)}")


def fill_jobs(cursor, vendor: str, template, owners: list[int], n: int) -> None:
    """``n`` copies of ``template`` with names like bench/job_list.py's (``word-word-i``), owners round robin."""
    from trainhub.jobs.models import Job

    cols = [f.column for f in Job._meta.concrete_fields if f.column not in ("id", "name", "owner_id")]
    words = ["resnet", "gpt", "llama", "sweep", "digits", "lora", "ddp", "baseline", "ablation", "tune"]
    word = lambda k: "CASE " + " ".join(f"WHEN {k} = {i} THEN '{w}'" for i, w in enumerate(words)) + " END"  # noqa: E731
    owner = "CASE " + " ".join(f"WHEN g % {len(owners)} = {i} THEN {pk}" for i, pk in enumerate(owners)) + " END"
    q = ", ".join(f'"{c}"' for c in cols)
    cursor.execute(f'INSERT INTO jobs_job ({q}, "name", "owner_id") SELECT {", ".join(f"t.{c}" for c in cols)}, '
                   f"{word('g % 10')} || '-' || {word('(g / 10) % 10')} || '-' || g, {owner} "
                   f"FROM jobs_job t, {series(n, vendor)} WHERE t.id = {template.pk}")


def set_indexes(present: bool, vendor: str) -> float:
    """Drop or build the search indexes (PostgreSQL); returns the seconds it took."""
    from django.db import connection

    started = time.perf_counter()
    if vendor == "postgresql":
        with connection.cursor() as cursor:
            for name, definition in INDEXES.items():
                cursor.execute(f"CREATE INDEX IF NOT EXISTS {name} {definition}" if present
                               else f"DROP INDEX IF EXISTS {name}")
            cursor.execute("ANALYZE jobs_logline")
            cursor.execute("ANALYZE jobs_job")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--other-lines", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    ns = parser.parse_args()
    from tests.conftest import RedisServer

    redis = RedisServer(Path(tempfile.mkdtemp(prefix="trainhub-logsearch-redis-")))
    redis.start()  # append_lines publishes each batch live, as the executor's writes do
    os.environ["REDIS_URL"] = redis.url
    try:
        run(ns)
    finally:
        redis.stop()


def run(ns: argparse.Namespace) -> None:
    vendor = prepare_environment()
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from trainhub.jobs import logs
    from trainhub.jobs.models import Job
    from trainhub.pools.models import WorkerPool

    pool = WorkerPool.objects.get_or_create(name="cpu", defaults={"kind": "cpu", "queue": "cpu"})[0]
    users = [get_user_model().objects.create_user(f"user{i}", password="bench-password-1") for i in range(10)]
    staff = get_user_model().objects.create_user("staff", password="bench-password-1", is_staff=True)
    job = Job.objects.create(owner=users[0], name="big-log", mode="centralized", pool=pool, spec={"name": "big-log"},
                             status="succeeded")
    others = [Job.objects.create(owner=users[i], name=f"other-{i}", mode="centralized", pool=pool, spec={"name": "o"},
                                 status="succeeded") for i in range(1, 5)]
    set_indexes(False, vendor)  # filled without them (as a database that had the lines before migration 0005)
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        fill_lines(cursor, vendor, job.pk, ns.lines, ns.lines * 9 // 10)
        for other in others:
            fill_lines(cursor, vendor, other.pk, ns.other_lines // len(others), None)
        fill_jobs(cursor, vendor, others[0], [u.pk for u in users], ns.jobs)
    Job.objects.filter(pk=job.pk).update(log_lines=ns.lines)
    fill_s = time.perf_counter() - started
    print(f"{vendor}: {ns.lines:,} lines in the job, {ns.other_lines:,} in four others, {ns.jobs:,} jobs, "
          f"filled in {fill_s:.0f} s", flush=True)

    user_client, staff_client = Client(), Client()
    user_client.force_login(users[0])
    staff_client.force_login(staff)
    rare = f"tune-ablation-{ns.jobs - 3}"  # one job of a million, owned by some user
    requests = {
        "search, 1 match": (user_client, f"/jobs/{job.pk}/logs/search?q=step+{ns.lines // 2 + 7}+"),
        "search, no match": (user_client, f"/jobs/{job.pk}/logs/search?q=nothing+like+this"),
        "search, every line matches (first page)": (user_client, f"/jobs/{job.pk}/logs/search?q=loss"),
        "first error (a line at 90 %)": (user_client, f"/jobs/{job.pk}/logs/first-error"),
        "job list, name search, a rare name (staff)": (staff_client, f"/?q={rare}"),
        "job list, name search, a rare name (user)": (user_client, f"/?q={rare}"),
        "job list, name search, a common word (staff)": (staff_client, "/?q=lora"),
    }
    samples: dict[str, dict[str, list[float]]] = {}
    queries: dict[str, dict[str, int]] = {}
    build_s = {}
    for phase, present in (("before", False), ("after", True)):
        build_s[phase] = set_indexes(present, vendor)
        samples[phase], queries[phase] = {}, {}
        for name, (client, url) in requests.items():
            response = client.get(url)  # warm-up, and the check that it answers
            assert response.status_code in (200, 302), (url, response.status_code)
            times = []
            for _ in range(ns.runs):
                with CaptureQueriesContext(connection) as captured:
                    t0 = time.perf_counter()
                    client.get(url)
                    times.append((time.perf_counter() - t0) * 1000)
            samples[phase][name], queries[phase][name] = times, len(captured)
            print(f"{phase:>6} | {name} | median {statistics.median(times):.1f} ms, max {max(times):.1f} ms", flush=True)
    # what the index costs the executor's writes: 100,000 lines in 500-line batches, without and with it
    write_s = {}
    extra = Job.objects.create(owner=users[0], name="writes", mode="centralized", pool=pool, spec={"name": "w"},
                               status="running")
    for phase, present in (("before", False), ("after", True)):
        set_indexes(present, vendor)
        base = 0 if phase == "before" else 100_000
        t0 = time.perf_counter()
        for start in range(base, base + 100_000, 500):
            logs.append_lines(extra.pk, [(seq, 0, "o", f"step {seq} loss {1 / (seq + 1):.6f} lr 0.001")
                                         for seq in range(start, start + 500)])
        write_s[phase] = time.perf_counter() - t0
        print(f"{phase:>6} | storing 100,000 lines in 500-line batches | {100_000 / write_s[phase]:,.0f} lines/s",
              flush=True)
    medians = {phase: {name: statistics.median(v) for name, v in by.items()} for phase, by in samples.items()}
    print("\n| request | before (no search index) | after | queries |\n| --- | --- | --- | --- |")
    for name in requests:
        print(f"| {name} | {medians['before'][name]:.1f} ms | {medians['after'][name]:.1f} ms | "
              f"{queries['after'][name]} |")
    record.write("log_search", {
        "lines_in_job": ns.lines, "lines_in_other_jobs": ns.other_lines, "jobs": ns.jobs, "runs": ns.runs,
        "fill_s": fill_s, "index_build_s": build_s["after"], "urls": {k: v[1] for k, v in requests.items()},
        "median_ms": medians, "samples_ms": samples, "queries": queries,
        "store_100k_lines_s": write_s, "store_lines_per_s": {k: 100_000 / v for k, v in write_s.items()},
        "indexes": INDEXES if vendor == "postgresql" else "none (SQLite: a scan of the job's rows)"},
        database=vendor)


if __name__ == "__main__":
    main()
