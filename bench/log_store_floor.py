"""How fast the database alone takes a job's log lines, without TrainHub around it: the floor under
``bench/log_throughput.py``'s lines/s on this machine.

One client, one job's lines, 20,000 per transaction, as the executor's writer sends them: by default
the lines ``bench/log_printer.py`` prints in ``log_throughput.py`` (``"<i> <time>"``, ~24 characters), with
``--long`` a training log's (``"<i> step <i> loss <x> lr 0.001 …"``, ~60 characters; the trigram
indexes' cost grows with the text). The tables have the columns and indexes of
``jobs_logline`` (a row id, the unique ``(job_id, seq)``):

- SQLite (a file of its own, WAL, ``synchronous=NORMAL`` as ``trainhub/settings.py`` sets):
  ``executemany`` alone, then with the FTS5 trigram index of migration jobs/0006 caught up per batch.
- PostgreSQL (when DATABASE_URL names a server; a fresh database ``trainhub_bench_floor``):
  ``executemany`` and ``COPY``, each without and with the pg_trgm GIN index of migration jobs/0005, and
  ``COPY`` of the lines plus one row per 500 lines holding their text under that index (a search index
  by chunk, written by the client), and ``COPY`` with what TrainHub runs since migration jobs/0009: the
  statement trigger that writes the chunks, under their GIN index; and that trigger without the index, which
  splits the cost of the search index between writing the chunks and indexing their trigrams. With
  ``--index-options``, that index beside variants that might keep it cheaper: chunks four times as wide, the
  text not upper-cased, a 64 MB GIN pending list.

Writes its raw result under bench/results/. Not a test.

    .venv/bin/python bench/log_store_floor.py [--lines 200000] [--long]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/python bench/log_store_floor.py [--index-options]
"""
from __future__ import annotations

import argparse
import importlib
import os
import sqlite3
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import record
from log_common import fresh_postgres

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
CHUNKS = importlib.import_module("trainhub.jobs.migrations.0009_logchunk")  # the chunk trigger's SQL

BATCH = 20_000
CHUNK = 500


def lines(count: int, long: bool) -> list[tuple]:
    now = datetime.now(timezone.utc)
    if long:
        return [(1, i, 0, "o", f"{i} step {i} loss {1 / (i + 1):.6f} lr 0.001 the quick brown fox", now)
                for i in range(count)]
    return [(1, i, 0, "o", f"{i} {now.timestamp() + i * 1e-5:.6f}", now) for i in range(count)]


def timed(run, rows: list[tuple]) -> dict:
    wall, cpu = time.perf_counter(), time.process_time()
    run(rows)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"lines_per_s": len(rows) / wall, "seconds": wall, "client_cpu_s": cpu}


def sqlite_variants(rows: list[tuple]) -> dict:
    out = {}
    for fts in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            db = sqlite3.connect(os.path.join(tmp, "floor.sqlite3"), isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE l (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id BIGINT NOT NULL, "
                       "seq BIGINT NOT NULL, rank SMALLINT NOT NULL, stream VARCHAR(1) NOT NULL, text TEXT NOT NULL, "
                       "at DATETIME NOT NULL, UNIQUE (job_id, seq))")
            if fts:
                db.execute("CREATE VIRTUAL TABLE f USING fts5(text, content='l', content_rowid='id', "
                           "tokenize='trigram', detail=none, columnsize=0)")

            def run(rows, db=db, fts=fts):
                done = 0
                for start in range(0, len(rows), BATCH):
                    db.execute("BEGIN IMMEDIATE")
                    db.executemany("INSERT INTO l (job_id, seq, rank, stream, text, at) VALUES (?, ?, ?, ?, ?, ?) "
                                   "ON CONFLICT (job_id, seq) DO NOTHING",
                                   [(*r[:5], r[5].isoformat()) for r in rows[start:start + BATCH]])
                    if fts:
                        last = db.execute("SELECT max(id) FROM l").fetchone()[0]
                        db.execute("INSERT INTO f(rowid, text) SELECT id, text FROM l WHERE id > ? AND id <= ?",
                                   (done, last))
                        done = last
                    db.execute("COMMIT")

            out["executemany + FTS5 trigram" if fts else "executemany"] = timed(run, rows)
            db.close()
    return out


def postgres_variants(url: str, rows: list[tuple], index_options: bool = False) -> dict:
    import psycopg

    url = fresh_postgres(url, "trainhub_bench_floor")
    out = {}
    columns = "job_id, seq, rank, stream, text, at"
    trigram = "CREATE INDEX l_trgm ON l USING gin (job_id, (upper(text)) gin_trgm_ops)"
    with psycopg.connect(url) as db:
        db.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        db.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
        db.commit()

        def executemany(rows):
            with db.cursor() as cursor:
                for start in range(0, len(rows), BATCH):
                    cursor.executemany(f"INSERT INTO l ({columns}) VALUES (%s, %s, %s, %s, %s, %s) "
                                       "ON CONFLICT (job_id, seq) DO NOTHING", rows[start:start + BATCH])
                    db.commit()

        def copy(rows, chunks=False):
            with db.cursor() as cursor:
                for start in range(0, len(rows), BATCH):
                    batch = rows[start:start + BATCH]
                    with cursor.copy(f"COPY l ({columns}) FROM STDIN") as sink:
                        for row in batch:
                            sink.write_row(row)
                    if chunks:
                        with cursor.copy("COPY c (job_id, first_seq, text) FROM STDIN") as sink:
                            for at in range(0, len(batch), CHUNK):
                                part = batch[at:at + CHUNK]
                                sink.write_row((1, part[0][1], "\n".join(r[4] for r in part)))
                    db.commit()

        def line_index():
            db.execute(trigram)

        def chunk_index():
            db.execute("CREATE INDEX c_trgm ON c USING gin (job_id, (upper(text)) gin_trgm_ops)")

        def trigger(chunks_of=CHUNKS.CHUNKS_OF, index=True, options=""):
            """What TrainHub runs (jobs/0009): the database writes the chunks, upper-cased, under their index."""
            db.execute("CREATE OR REPLACE FUNCTION c_add() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                       "INSERT INTO c (job_id, first_seq, last_seq, text) "
                       f"{chunks_of.format(lines='new_lines')}; RETURN NULL; END $$")
            db.execute("CREATE TRIGGER c_add AFTER INSERT ON l REFERENCING NEW TABLE AS new_lines "
                       "FOR EACH STATEMENT EXECUTE FUNCTION c_add()")
            if index:
                db.execute(f"CREATE INDEX c_trgm ON c {CHUNKS.INDEX_METHOD}{options}")

        jobs_0009 = ("copy + the chunk trigger and its pg_trgm GIN (jobs/0009)", copy, trigger)
        if index_options:  # what might make the search index cheaper to keep, side by side with it
            wider = CHUNKS.CHUNKS_OF.replace(f"seq / {CHUNKS.CHUNK_LINES}", f"seq / {4 * CHUNKS.CHUNK_LINES}")
            assert wider != CHUNKS.CHUNKS_OF
            variants = [jobs_0009,
                        (f"the same, chunks of {4 * CHUNKS.CHUNK_LINES} lines", copy, lambda: trigger(wider)),
                        ("the same, the text not upper-cased", copy,
                         lambda: trigger(CHUNKS.CHUNKS_OF.replace("upper(text)", "text"))),
                        ("the same, gin_pending_list_limit 64 MB", copy,
                         lambda: trigger(options=" WITH (gin_pending_list_limit = 65536)")),
                        ("copy + the chunk trigger, without its index", copy, lambda: trigger(index=False))]
        else:
            variants = [("executemany", executemany, None), ("copy", copy, None),
                        ("executemany + pg_trgm GIN", executemany, line_index), ("copy + pg_trgm GIN", copy, line_index),
                        (f"copy + pg_trgm GIN on one row per {CHUNK} lines", lambda rows: copy(rows, chunks=True),
                         chunk_index),
                        ("copy + the chunk trigger, without its index", copy, lambda: trigger(index=False)), jobs_0009]
        for name, run, setup in variants:
            db.execute("DROP TABLE IF EXISTS l")
            db.execute("DROP TABLE IF EXISTS c")
            db.execute("CREATE TABLE l (id BIGSERIAL PRIMARY KEY, job_id BIGINT NOT NULL, seq BIGINT NOT NULL, "
                       "rank SMALLINT NOT NULL, stream VARCHAR(1) NOT NULL, text TEXT NOT NULL, "
                       "at TIMESTAMPTZ NOT NULL, UNIQUE (job_id, seq))")
            db.execute("CREATE TABLE c (id BIGSERIAL PRIMARY KEY, job_id BIGINT NOT NULL, first_seq BIGINT NOT NULL, "
                       "last_seq BIGINT, text TEXT NOT NULL)")
            if setup:
                setup()
            db.commit()
            out[name] = timed(run, rows)
        db.execute("DROP TABLE IF EXISTS l")
        db.execute("DROP TABLE IF EXISTS c")
        db.commit()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--long", action="store_true", help="~60-character lines instead of ~24")
    parser.add_argument("--index-options", action="store_true",
                        help="PostgreSQL: TrainHub's search index beside variants of it (wider chunks, no upper(), "
                             "a larger GIN pending list) and without it")
    args = parser.parse_args()
    rows = lines(args.lines, args.long)
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith("postgres"):
        database, result = "postgresql", postgres_variants(url, rows, args.index_options)
    else:
        database, result = "sqlite", sqlite_variants(rows)
    for name, figures in result.items():
        print(f"{database} {name}: {figures['lines_per_s']:,.0f} lines/s "
              f"(client CPU {figures['client_cpu_s'] / len(rows) * 1e6:.1f} µs a line)")
    record.write("log_store_floor", {"lines": args.lines, "batch": BATCH, "long_lines": args.long,
                                     "index_options": args.index_options, "variants": result}, database=database)


if __name__ == "__main__":
    main()
