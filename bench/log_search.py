"""Log search, "first error" and the job list's name search at scale, without and with the search
indexes (PostgreSQL: pg_trgm GIN over chunks of log lines, jobs/0009, and over job names, jobs/0005;
SQLite: FTS5, jobs/0006), side by side in one run, with the plans of the search queries. On PostgreSQL
"without" drops the two GIN indexes; the chunks themselves and the trigger that writes them stay (search
then reads every chunk of the job: a scan of ~1/500 as many rows as the lines).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/log_search.py
    .venv/bin/python bench/log_search.py --lines 1000000 --jobs 100000      # SQLite

Builds its own database (a fresh ``$TRAINHUB_BENCH_DB``, default ``trainhub_bench_logsearch``, on the
PostgreSQL server of DATABASE_URL, or a SQLite file under the temp dir; ``--reuse`` keeps one filled
by an earlier run), fills it server-side (one job with ``--lines`` lines, a
"RuntimeError" line at 90 %, beside ``--other-lines`` lines of four other jobs, which end in a phrase the
big job never holds; ``--jobs`` jobs over
10 users for the name search), then times each request ``--runs`` times after a warm-up: first
with the indexes dropped ("before"), then with them built ("after"). Times are server time through
Django's test client in-process (URL → view → queries → template, no network), as in
bench/job_list.py; each request's search queries are explained (EXPLAIN (ANALYZE, BUFFERS) on
PostgreSQL, EXPLAIN QUERY PLAN on SQLite) and the load average is recorded beside. Also times storing
lines through ``logs.append_lines`` (the executor's write) without and with the index, CPU time
beside wall time: the index's cost on log throughput. Raw samples and plans under bench/results/
(bench/record.py).
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
from bench.log_common import fresh_postgres  # noqa: E402

BENCH_DB = os.environ.get("TRAINHUB_BENCH_DB", "trainhub_bench_logsearch")
CHUNKS = importlib.import_module("trainhub.jobs.migrations.0009_logchunk")
INDEXES = {"job_name_trgm": importlib.import_module("trainhub.jobs.migrations.0005_log_and_name_search_indexes")
           .INDEXES["job_name_trgm"], CHUNKS.INDEX: CHUNKS.INDEX_SQL}
FTS = importlib.import_module("trainhub.jobs.migrations.0006_logline_fts_sqlite")
RANGES = importlib.import_module("trainhub.jobs.migrations.0011_job_log_id_range")
FTS_SQL, FTS_DROP = FTS.SQL, FTS.DROP
#: on every line of the four other jobs, on none of the big one's: searching the big job for it must not
#: look at the other jobs' lines (or chunks) at all
OTHER_WORD = " grad_norm 1.5"
WORDS = ["resnet", "gpt", "llama", "sweep", "digits", "lora", "ddp", "baseline", "ablation", "tune"]


def prepare_environment(reuse: bool) -> str:
    url = os.environ.get("DATABASE_URL", "")
    var_dir = Path(tempfile.gettempdir()) / f"trainhub-logsearch-{BENCH_DB}"
    if url.startswith("postgres"):
        os.environ["DATABASE_URL"] = fresh_postgres(url, BENCH_DB, reuse)
    elif not reuse and var_dir.exists():
        import shutil

        shutil.rmtree(var_dir)
    var_dir.mkdir(exist_ok=True)
    os.environ["TRAINHUB_VAR_DIR"] = str(var_dir)
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


def fill_lines(cursor, vendor: str, job_id: int, n: int, error_at: int | None, tail: str = "") -> None:
    """``n`` lines ``step g loss … lr 0.001`` (+ ``tail``), an error line at ``error_at``."""
    error = f"WHEN g = {error_at} THEN 'RuntimeError: CUDA error: out of memory' " if error_at is not None else "WHEN false THEN NULL "
    now = "now()" if vendor == "postgresql" else "datetime('now')"
    cursor.execute(f"INSERT INTO jobs_logline (job_id, seq, rank, stream, text, at) "
                   f"SELECT {job_id}, g, g % 2, 'o', CASE {error}ELSE 'step ' || g || ' loss ' || "
                   f"round(1.0 / (g + 1), 6) || ' lr 0.001{tail}' END, {now} FROM {series(n, vendor)}")


def fill_jobs(cursor, vendor: str, template, owners: list[int], n: int) -> None:
    """``n`` copies of ``template`` with names like bench/job_list.py's (``word-word-i``), owners round robin."""
    from trainhub.jobs.models import Job

    cols = [f.column for f in Job._meta.concrete_fields if f.column not in ("id", "name", "owner_id")]
    word = lambda k: "CASE " + " ".join(f"WHEN {k} = {i} THEN '{w}'" for i, w in enumerate(WORDS)) + " END"  # noqa: E731
    owner = "CASE " + " ".join(f"WHEN g % {len(owners)} = {i} THEN {pk}" for i, pk in enumerate(owners)) + " END"
    q = ", ".join(f'"{c}"' for c in cols)
    cursor.execute(f'INSERT INTO jobs_job ({q}, "name", "owner_id") SELECT {", ".join(f"t.{c}" for c in cols)}, '
                   f"{word('g % 10')} || '-' || {word('(g / 10) % 10')} || '-' || g, {owner} "
                   f"FROM jobs_job t, {series(n, vendor)} WHERE t.id = {template.pk}")


def set_indexes(present: bool, vendor: str) -> float:
    """Drop or build the search indexes (PostgreSQL: pg_trgm over log chunks, jobs/0009, and job names,
    jobs/0005; SQLite: FTS5 and its triggers, jobs/0006); returns the seconds it took."""
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        if vendor == "postgresql":
            for name, definition in INDEXES.items():
                cursor.execute(f"CREATE INDEX IF NOT EXISTS {name} {definition}" if present
                               else f"DROP INDEX IF EXISTS {name}")
            cursor.execute("ANALYZE jobs_logline")
            cursor.execute("ANALYZE jobs_logchunk")
            cursor.execute("ANALYZE jobs_job")
        else:
            for statement in FTS_SQL if present else FTS_DROP:
                cursor.execute(statement)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--other-lines", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--reuse", action="store_true", help="keep the bench database of an earlier run (same sizes)")
    parser.add_argument("--phases", nargs="*", default=["before", "after"], choices=["before", "after"],
                        help="before: without the search indexes; after: with them")
    parser.add_argument("--writes", action=argparse.BooleanOptionalAction, default=True,
                        help="also time storing lines without and with the index")
    parser.add_argument("--write-repeats", type=int, default=5)
    parser.add_argument("--fill-only", action="store_true", help="build and fill the database, measure nothing")
    ns = parser.parse_args()
    from tests.conftest import RedisServer

    redis = RedisServer(Path(tempfile.mkdtemp(prefix="trainhub-logsearch-redis-")))
    redis.start()  # append_lines publishes each batch live, as the executor's writes do
    os.environ["REDIS_URL"] = redis.url
    try:
        run(ns)
    finally:
        redis.stop()


def fill(ns: argparse.Namespace, vendor: str, pool):
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from trainhub.jobs.models import Job

    users = [get_user_model().objects.create_user(f"user{i}", password="bench-password-1") for i in range(10)]
    get_user_model().objects.create_user("staff", password="bench-password-1", is_staff=True)
    job = Job.objects.create(owner=users[0], name="big-log", mode="centralized", pool=pool, spec={"name": "big-log"},
                             status="succeeded")
    others = [Job.objects.create(owner=users[i], name=f"other-{i}", mode="centralized", pool=pool, spec={"name": "o"},
                                 status="succeeded") for i in range(1, 5)]
    set_indexes(False, vendor)  # filled without them; on PostgreSQL the trigger of jobs/0009 writes the chunks
    started = time.perf_counter()
    with transaction.atomic(), connection.cursor() as cursor:
        fill_lines(cursor, vendor, job.pk, ns.lines, ns.lines * 9 // 10)
        for other in others:
            fill_lines(cursor, vendor, other.pk, ns.other_lines // len(others), None, OTHER_WORD)
        fill_jobs(cursor, vendor, others[0], [u.pk for u in users], ns.jobs)
    Job.objects.filter(pk=job.pk).update(log_lines=ns.lines)
    if vendor == "sqlite":  # each job's line id range, as logs.append_lines keeps it there (jobs/0011)
        with connection.cursor() as cursor:
            cursor.execute(f"{RANGES.FILL} WHERE id IN ({', '.join(str(j.pk) for j in [job, *others])})")
    job.refresh_from_db()
    fill_s = time.perf_counter() - started
    print(f"{vendor}: {ns.lines:,} lines in the job, {ns.other_lines:,} in four others, {ns.jobs:,} jobs, "
          f"filled in {fill_s:.0f} s", flush=True)
    return job, fill_s


def run(ns: argparse.Namespace) -> None:
    vendor = prepare_environment(ns.reuse)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from trainhub.jobs.models import Job
    from trainhub.pools.models import WorkerPool

    pool = WorkerPool.objects.get_or_create(name="cpu", defaults={"kind": "cpu", "queue": "cpu"})[0]
    job = Job.objects.filter(name="big-log").first()
    if job is None:
        job, fill_s = fill(ns, vendor, pool)
    else:  # --reuse: the database of an earlier run, filled the same way
        fill_s = None
        print(f"{vendor}: reusing {BENCH_DB}: {Job.objects.count():,} jobs", flush=True)
    users = list(get_user_model().objects.filter(username__startswith="user").order_by("pk"))
    staff = get_user_model().objects.get(username="staff")
    if ns.fill_only:
        return
    user_client, staff_client = Client(), Client()
    user_client.force_login(users[0])
    staff_client.force_login(staff)
    g = ns.jobs - 3  # one job of a million (fill_jobs' names: word(g % 10)-word(g / 10 % 10)-g)
    rare = f"{WORDS[g % 10]}-{WORDS[g // 10 % 10]}-{g}"
    requests = {
        "search, 1 match": (user_client, f"/jobs/{job.pk}/logs/search?q=step+{ns.lines // 2 + 7}+"),
        "search, no match": (user_client, f"/jobs/{job.pk}/logs/search?q=nothing+like+this"),
        "search, every line matches (first page)": (user_client, f"/jobs/{job.pk}/logs/search?q=loss"),
        "search, a phrase only the other jobs hold": (user_client,
                                                      f"/jobs/{job.pk}/logs/search?q={OTHER_WORD.strip().replace(' ', '+')}"),
        "search, the error line at 90 %": (user_client, f"/jobs/{job.pk}/logs/search?q=RuntimeError"),
        "first error (a line at 90 %)": (user_client, f"/jobs/{job.pk}/logs/first-error"),
        "job list, name search, a rare name (staff)": (staff_client, f"/?q={rare}"),
        "job list, name search, a rare name (user)": (user_client, f"/?q={rare}"),
        "job list, name search, no such name (staff)": (staff_client, "/?q=tune-ablation-nothing"),
        "job list, name search, a common word (staff)": (staff_client, "/?q=lora"),
    }
    samples: dict[str, dict[str, list[float]]] = {}
    queries: dict[str, dict[str, int]] = {}
    plans: dict[str, dict[str, list]] = {}
    build_s, load = {}, {}
    for phase, present in (("before", False), ("after", True)):
        if phase not in ns.phases:
            continue
        build_s[phase] = set_indexes(present, vendor)
        samples[phase], queries[phase], plans[phase], load[phase] = {}, {}, {}, [os.getloadavg()]
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
            plans[phase][name] = explain(captured.captured_queries, vendor)
            print(f"{phase:>6} | {name} | median {statistics.median(times):.1f} ms, max {max(times):.1f} ms | "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
        load[phase].append(os.getloadavg())
    writes = measure_writes(ns, vendor, users[0], pool) if ns.writes else {}
    medians = {phase: {name: statistics.median(v) for name, v in by.items()} for phase, by in samples.items()}
    print("\n| request | " + " | ".join(medians) + " | queries |\n| --- |" + " --- |" * (len(medians) + 1))
    for name in requests:
        print(f"| {name} | " + " | ".join(f"{by[name]:.1f} ms" for by in medians.values()) +
              f" | {queries[list(medians)[-1]][name]} |")
    record.write("log_search", {
        "lines_in_job": ns.lines, "lines_in_other_jobs": ns.other_lines, "jobs": ns.jobs, "runs": ns.runs,
        "fill_s": fill_s, "index_build_s": build_s, "urls": {k: v[1] for k, v in requests.items()},
        "load_average_at_phase_start_end": load, "median_ms": medians, "samples_ms": samples, "queries": queries,
        "plans": plans, "writes": writes,
        "indexes": INDEXES if vendor == "postgresql" else {"fts5": FTS_SQL}},
        database=vendor)


def explain(captured: list[dict], vendor: str) -> list[dict]:
    """The plans of a request's search queries: EXPLAIN (ANALYZE, BUFFERS) on PostgreSQL (it runs them
    once more), EXPLAIN QUERY PLAN on SQLite."""
    from django.db import connection, transaction

    found = []
    with transaction.atomic():  # the request's own SET LOCAL (the chunk search's) holds for what follows it
        for query in captured:
            sql = query["sql"]
            if sql.startswith("SET LOCAL"):
                with connection.cursor() as cursor:
                    cursor.execute(sql)
                continue
            if plan := _explain(sql, vendor):
                found.append(plan)
    return found


def _explain(sql: str, vendor: str) -> dict | None:
    """One search query's plan, or None for a statement that is not one."""
    from django.db import connection

    if not sql.lstrip().upper().startswith(("SELECT", "WITH")) or (" LIKE " not in sql and " MATCH " not in sql):
        return None
    with connection.cursor() as cursor:
        cursor.execute(("EXPLAIN (ANALYZE, BUFFERS) " if vendor == "postgresql" else "EXPLAIN QUERY PLAN ") + sql)
        rows = cursor.fetchall()
    return {"sql": sql, "plan": [row[0] if vendor == "postgresql" else row[-1] for row in rows]}


def cpu_seconds(pid: int | None) -> float:
    """This process's CPU time plus the PostgreSQL backend's (``pid``), which does the inserting there."""
    total = time.process_time()
    if pid:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def measure_writes(ns: argparse.Namespace, vendor: str, owner, pool) -> dict:
    """What the index costs the executor's writes (``logs.append_lines``: 500-line batches, each its own
    transaction and a Redis publish): ``--write-repeats`` times 20,000 lines without, then with it.
    CPU time (this process + the PostgreSQL backend) is the figure to read under load; wall time beside."""
    from django.db import connection

    from trainhub.jobs import logs
    from trainhub.jobs.models import Job

    job = Job.objects.create(owner=owner, name="writes", mode="centralized", pool=pool, spec={"name": "w"},
                             status="running")
    lines, seq, result = 20_000, 0, {}
    for phase, present in (("without index", False), ("with index", True)):
        set_indexes(present, vendor)
        wall, cpu = [], []
        for _ in range(ns.write_repeats):
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()" if vendor == "postgresql" else "SELECT NULL")
                pid = cursor.fetchone()[0]
            t0, c0 = time.perf_counter(), cpu_seconds(pid)
            for start in range(seq, seq + lines, 500):
                logs.append_lines(job.pk, [(n, 0, "o", f"step {n} loss {1 / (n + 1):.6f} lr 0.001")
                                           for n in range(start, start + 500)])
            wall.append(time.perf_counter() - t0)
            cpu.append(cpu_seconds(pid) - c0)
            seq += lines
        result[phase] = {"lines_per_repeat": lines, "wall_s": wall, "cpu_s": cpu,
                         "median_lines_per_s": lines / statistics.median(wall),
                         "median_cpu_us_per_line": statistics.median(cpu) / lines * 1e6, "load": os.getloadavg()}
        print(f"storing {lines:,} lines, {phase}: {result[phase]['median_lines_per_s']:,.0f} lines/s, "
              f"{result[phase]['median_cpu_us_per_line']:.1f} µs CPU per line (median of {ns.write_repeats})",
              flush=True)
    return result


if __name__ == "__main__":
    main()
