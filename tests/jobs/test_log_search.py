"""Log search and "first error" through the search index (pg_trgm over chunks of lines on PostgreSQL, FTS5 on SQLite):
the same answers as a scan on both back ends, for awkward queries and for lines written, changed or
cut after the index was built. Run on SQLite by default and with DATABASE_URL on PostgreSQL."""
from __future__ import annotations

import importlib
import re

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from trainhub.jobs import logs, retention
from trainhub.jobs.models import Job, LogLine

PROBE = 4  # lines read in order before the index is asked: past it, every answer below comes from the index

TEXTS = [
    "step 1 loss 0.5",
    "RuntimeError: CUDA error: out of memory",
    'he said "hello" to the "world"',
    "it's O'Brien's turn",
    "progress 100% done, 50%ok",
    "snake_case_name and snakeXcaseXname",
    r"path C:\temp\new and C:/temp",
    "Größe 42 µs café naïve",
    "NEAR(a b) AND x* OR -y ^z col:val {a} [b]",
    "MiXeD CaSe LiNe",
    "tabs\tand  two  spaces",
]
QUERIES = [
    ("error", {1}),  # case: "Error" and "error" both
    ("ERROR", {1}),
    ("runtimeerror", {1}),
    ('"hello"', {2}),  # double quotes (FTS5's phrase delimiter)
    ('" to the "', {2}),
    ("'s", {3}),  # a single quote, under 3 characters: the scan
    ("O'Brien", {3}),
    ("100%", {4}),  # % is a literal, not LIKE's wildcard
    ("0%o", {4}),
    ("%", {4}),
    ("e_c", {5}),  # _ is a literal: "snakeXcase" must not match
    ("_case_", {5}),
    ("C:\\temp", {6}),  # a backslash, LIKE's escape character here
    ("\\new", {6}),
    ("größe", {7}),  # non-ASCII, same case (see docs/BENCHMARKS.md for case folding outside ASCII)
    ("µs café", {7}),
    ("NEAR(a b)", {8}),  # FTS5 query syntax is a literal
    ("x* OR -y", {8}),
    ("col:val", {8}),
    ("{a} [b]", {8}),
    ("mixed case", {9}),
    ("e l", {9}),  # three characters: the smallest query the trigram index answers
    ("s\ta", {10}),
    ("  two  ", {10}),
    ("nothing like this", set()),
    ("ss", {0, 4}),  # two characters: the scan (and "ß" is not "ss")
]


@pytest.fixture
def job(running_job):
    return running_job


@pytest.fixture
def small_probe(monkeypatch):
    """Past the first PROBE lines the index answers; on SQLite every stored batch is indexed at once."""
    monkeypatch.setattr(logs, "PROBE", PROBE)
    monkeypatch.setattr(logs, "FIRST_ERROR_PROBE", PROBE)
    monkeypatch.setattr(logs, "FTS_CATCH_UP", 1)


def store(job, first_seq: int, texts: list[str]) -> None:
    logs.append_lines(job.pk, [(first_seq + i, i % 2, "o", text) for i, text in enumerate(texts)])


def found(job, query: str, **kwargs) -> set[int]:
    return {line.seq for line in logs.search_lines(job.pk, query, **kwargs)}


def used_the_index(captured) -> bool:
    """Whether a search asked the index: FTS5's MATCH on SQLite, the chunks on PostgreSQL."""
    mark = " MATCH " if connection.vendor == "sqlite" else "FROM jobs_logchunk"  # not chunks_ready()'s trigger names
    return any(mark in q["sql"] for q in captured.captured_queries)


def asked_the_trigram_index(captured) -> bool:
    """Whether a search asked the trigram index for the whole log: FTS5's MATCH on SQLite; on PostgreSQL a chunk
    query without the probe's bound (the probe's looks at the chunks of the next PROBE seqs in seq order)."""
    if connection.vendor == "sqlite":
        return used_the_index(captured)
    return any("FROM jobs_logchunk" in q["sql"] and "first_seq <=" not in q["sql"] for q in captured.captured_queries)


def test_the_index_is_in_place_after_migrating(db):
    if connection.vendor == "sqlite":
        assert logs.fts_ready(), "migration jobs/0006 left no FTS5 table or triggers on jobs_logline"
        return
    assert logs.chunks_ready(), "migration jobs/0009 left no chunk triggers on jobs_logline"
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename IN ('jobs_logline', 'jobs_logchunk')")
        indexes = {row[0] for row in cursor.fetchall()}
    assert {"logchunk_text_trgm", "logchunk_job_first_seq"} <= indexes
    assert "logline_text_trgm" not in indexes, "the per-line trigram index (jobs/0005) is still paid on every line"


@pytest.mark.parametrize(("query", "expected"), QUERIES, ids=[repr(q) for q, _ in QUERIES])
def test_search_answers_awkward_queries_as_a_substring_match_on_both_back_ends(job, small_probe, query, expected):
    filler = [f"filler {i}" for i in range(2 * PROBE)]  # the texts below lie past the probe: the index answers
    store(job, 0, filler + TEXTS)
    shift = len(filler)
    want = {shift + i for i in expected}
    assert all(query.lower() in TEXTS[i].lower() for i in expected)  # the expectation itself is a substring match
    assert found(job, query) == want
    assert found(job, query, after=shift - 1) == want  # a page starting right before them
    other = Job.objects.create(owner=job.owner, name="other", mode="centralized", pool=job.pool, spec={})
    store(other, 0, TEXTS)  # the same texts in another job are not this job's matches
    assert found(job, query) == want


def test_a_query_with_a_nul_character_is_answered_not_refused(job, small_probe, user_client):
    store(job, 0, [f"filler {i}" for i in range(3 * PROBE)] + ["x yz"])
    assert found(job, "x\x00yz") == set()
    assert user_client.get(f"/jobs/{job.pk}/logs/search?q=x%00yz").status_code == 200
    if connection.vendor == "sqlite":  # SQLite stores such a line (PostgreSQL refuses it)
        store(job, 3 * PROBE + 1, ["x\x00yz"])
        assert found(job, "x\x00yz") == {3 * PROBE + 1}


def test_search_past_the_probe_goes_through_the_index(job, small_probe):
    store(job, 0, [f"filler {i}" for i in range(3 * PROBE)] + ["the needle"])
    with CaptureQueriesContext(connection) as captured:
        assert found(job, "NEEDLE") == {3 * PROBE}
    assert used_the_index(captured)


def test_a_query_answered_within_the_probe_does_not_ask_the_trigram_index(job, small_probe):
    """A query that matches often is answered from the next PROBE seqs; the trigram index would list (SQLite) or
    recheck (PostgreSQL) its matches over the whole log. Past the probe's answers, it is asked."""
    store(job, 0, [f"needle {i}" if i % 2 else f"filler {i}" for i in range(PROBE)]
          + [f"needle {PROBE + i}" for i in range(50)])
    with CaptureQueriesContext(connection) as captured:
        assert found(job, "needle", limit=2) == {1, 3}
    assert not asked_the_trigram_index(captured)
    with CaptureQueriesContext(connection) as captured:
        assert found(job, "needle", limit=3) == {1, 3, PROBE}
    assert asked_the_trigram_index(captured)
    with CaptureQueriesContext(connection) as captured:  # paging: the probe starts after the page's last line
        assert found(job, "needle", after=PROBE + 10, limit=PROBE) == set(range(PROBE + 11, 2 * PROBE + 11))
    assert not asked_the_trigram_index(captured)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's chunk index; SQLite's FTS5 holds no job id")
def test_postgres_the_trigram_index_is_asked_for_this_jobs_chunks_only(job, small_probe):
    """btree_gin compares a bigint job id only with a bigint: given an integer, the index left the job out of its
    condition and rechecked every job's matching chunks (3x the time for a phrase only other jobs hold,
    docs/BENCHMARKS.md "Log search")."""
    store(job, 0, [f"filler {i}" for i in range(3 * PROBE)] + ["the needle"])
    with CaptureQueriesContext(connection) as captured:
        assert found(job, "needle") == {3 * PROBE}
    asked = [q["sql"] for q in captured.captured_queries if "FROM jobs_logchunk" in q["sql"] and "first_seq <=" not in q["sql"]]
    assert len(asked) == 1
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DROP INDEX logchunk_job_first_seq")  # rolled back below: the trigram index is left to plan with
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + asked[0])
        plan = "\n".join(row[0] for row in cursor.fetchall())
        transaction.set_rollback(True)
    assert "logchunk_text_trgm" in plan and re.search(r"Index Cond: \(+job_id = ", plan), plan


def test_many_matching_batches_are_found_in_seq_order_and_page_by_seq(job, small_probe, monkeypatch):
    """Each stored batch is a chunk of its own on PostgreSQL; search reads their seq ranges a window at a time."""
    monkeypatch.setattr(logs, "CHUNK_WINDOW", 2)
    for batch in range(40):
        store(job, 3 * batch, [f"step {batch}", f"needle {batch}", "quiet"])
    needles = [3 * batch + 1 for batch in range(40)]
    assert [line.seq for line in logs.search_lines(job.pk, "needle")] == needles
    assert [line.seq for line in logs.search_lines(job.pk, "needle", limit=5)] == needles[:5]
    assert [line.seq for line in logs.search_lines(job.pk, "needle", after=needles[20], limit=3)] == needles[21:24]
    assert [line.seq for line in logs.search_lines(job.pk, "needle", rank=1)] == needles  # store(): rank = i % 2
    assert logs.search_lines(job.pk, "needle", rank=0) == []  # every chunk matches, no line does: all are read
    LogLine.objects.filter(job=job, seq=needles[30]).update(text="needle, changed")  # in two chunks now
    assert [line.seq for line in logs.search_lines(job.pk, "needle")] == needles


def test_search_stays_correct_for_lines_written_changed_and_cut_after_the_index_exists(job, small_probe):
    store(job, 0, [f"filler {i}" for i in range(3 * PROBE)])
    assert found(job, "late arrival") == set()
    store(job, 3 * PROBE, ["a late arrival", "another LATE ARRIVAL", "rank filter"])
    assert found(job, "late arrival") == {3 * PROBE, 3 * PROBE + 1}
    assert found(job, "late arrival", rank=1) == {3 * PROBE + 1}
    assert found(job, "late arrival", after=3 * PROBE) == {3 * PROBE + 1}
    LogLine.objects.filter(job=job, seq=3 * PROBE).update(text="rewritten line")
    assert found(job, "late arrival") == {3 * PROBE + 1}
    assert found(job, "rewritten") == {3 * PROBE}
    LogLine.objects.filter(job=job, seq=3 * PROBE + 1).delete()
    assert found(job, "late arrival") == set()


def test_sqlite_lines_not_yet_indexed_are_found_beside_indexed_ones_and_join_the_index_later(job, small_probe,
                                                                                            monkeypatch):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's FTS5 index, filled in bulk")
    store(job, 0, [f"filler {i}" for i in range(3 * PROBE)] + ["indexed needle"])
    monkeypatch.setattr(logs, "FTS_CATCH_UP", 10_000)  # the writer leaves the next lines to a later catch-up
    store(job, 3 * PROBE + 1, ["waiting needle", "waiting too"])
    LogLine.objects.filter(job=job, seq=3 * PROBE + 2).update(text="another NEEDLE, changed before indexing")
    assert found(job, "needle") == {3 * PROBE, 3 * PROBE + 1, 3 * PROBE + 2}
    assert found(job, "needle", after=3 * PROBE) == {3 * PROBE + 1, 3 * PROBE + 2}
    assert logs.search_lines(job.pk, "needle", limit=1)[0].seq == 3 * PROBE  # by seq across both
    with transaction.atomic():
        assert logs.fts_catch_up() == 2
    LogLine.objects.filter(job=job, seq=3 * PROBE + 1).delete()
    with CaptureQueriesContext(connection) as captured:
        assert found(job, "needle") == {3 * PROBE, 3 * PROBE + 2}
    assert used_the_index(captured)


def test_sqlite_search_asks_the_index_for_the_jobs_line_ids_only_and_they_cover_every_line(job, small_probe):
    """FTS5 holds every job's lines; a search asks it for the job's line id range (jobs/0011), which the writer keeps
    for lines stored alone, in a group of several jobs' batches, and again after a retried batch."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's FTS5 index holds no job; PostgreSQL's chunks do")
    other = Job.objects.create(owner=job.owner, name="other", mode="centralized", pool=job.pool, spec={})
    store(job, 0, [f"filler {i}" for i in range(3 * PROBE)] + ["needle one"])
    store(other, 0, ["needle elsewhere"] * (4 * PROBE))
    logs._write([logs._Batch(job.pk, [(3 * PROBE + 1, 0, "o", "needle two")]),  # one group, two jobs
                 logs._Batch(other.pk, [(4 * PROBE, 0, "o", "needle elsewhere")])])
    store(job, 3 * PROBE + 2, ["needle three"])
    store(job, 3 * PROBE + 2, ["needle three"])  # stored already (a retry after an outage): no new id
    ids = {j.pk: list(LogLine.objects.filter(job=j).values_list("id", flat=True)) for j in (job, other)}
    for j in (job, other):
        j.refresh_from_db()
        assert (j.log_first_id, j.log_last_id) == (min(ids[j.pk]), max(ids[j.pk]))
    assert found(job, "needle") == {3 * PROBE, 3 * PROBE + 1, 3 * PROBE + 2}
    assert found(other, "needle elsewhere", after=2 * PROBE) == set(range(2 * PROBE + 1, 4 * PROBE + 1))
    Job.objects.filter(pk=job.pk).update(log_last_id=ids[job.pk][-2])  # the range is what bounds the index:
    assert found(job, "needle") == {3 * PROBE, 3 * PROBE + 1}  # the line past it is not asked for
    migration = importlib.import_module("trainhub.jobs.migrations.0011_job_log_id_range")
    Job.objects.update(log_first_id=None, log_last_id=None)
    with connection.cursor() as cursor:  # the migration's fill for lines stored before it
        cursor.execute(migration.FILL)
    job.refresh_from_db()
    assert (job.log_first_id, job.log_last_id) == (min(ids[job.pk]), max(ids[job.pk]))


def test_sqlite_index_is_rebuilt_when_line_ids_start_again(job, small_probe):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's FTS5 index")
    store(job, 0, [f"filler {i}" for i in range(3 * PROBE)])
    with connection.cursor() as cursor:  # as after `manage.py flush`, which resets the ids below the mark
        cursor.execute(f"UPDATE {logs.FTS_STATE} SET indexed_to = 1000000")
    store(job, 3 * PROBE, ["after the reset"])
    assert found(job, "after the reset") == {3 * PROBE}
    assert found(job, "filler 1") == {1} | set(range(10, 3 * PROBE))


def test_search_finds_no_line_that_retention_cut(job, small_probe):
    store(job, 0, [f"line {i} keep" if i < 3 else f"line {i} cut me" for i in range(20)])
    assert len(found(job, "cut me")) == 17
    deleted = retention.enforce(job.pk, next_seq=20, limit=10)
    kept = set(LogLine.objects.filter(job=job, text__contains="cut me").values_list("seq", flat=True))
    assert deleted and found(job, "cut me") == kept


def test_first_error_past_the_probe_comes_from_the_index_and_the_earliest_wins(job, small_probe):
    store(job, 0, [f"step {i}" for i in range(3 * PROBE)])
    assert logs.first_error(job.pk) is None
    store(job, 3 * PROBE, ["fine", "Traceback (most recent call last):", "  File x", "ValueError: bad", "an EXCEPTION"])
    assert logs.first_error(job.pk) == 3 * PROBE + 1
    LogLine.objects.filter(job=job, seq=3 * PROBE - 1).update(text="an exception was ignored")
    assert logs.first_error(job.pk) == 3 * PROBE - 1
    LogLine.objects.filter(job=job, seq=2).update(text="errors: 0")  # inside the probe
    assert logs.first_error(job.pk) == 2


def test_the_index_is_filled_with_the_lines_stored_before_it(job, small_probe):
    number = "0006_logline_fts_sqlite" if connection.vendor == "sqlite" else "0009_logchunk"
    migration = importlib.import_module(f"trainhub.jobs.migrations.{number}")
    drop, build = ((migration.DROP, migration.SQL) if connection.vendor == "sqlite" else
                   (migration.DROP_SQL, [*migration.TRIGGER_SQL, migration.BACKFILL_SQL]))
    with connection.cursor() as cursor:
        for statement in drop:
            cursor.execute(statement)
        assert not (logs.fts_ready() or logs.chunks_ready())
        store(job, 0, [f"filler {i}" for i in range(3 * PROBE)] + ["stored before the index"])
        assert found(job, "before the index") == {3 * PROBE}  # no index: the scan
        assert logs.first_error(job.pk) is None
        for statement in build:
            cursor.execute(statement)
    assert logs.fts_ready() or logs.chunks_ready()
    with CaptureQueriesContext(connection) as captured:
        assert found(job, "before the index") == {3 * PROBE}
    assert used_the_index(captured)
    store(job, 3 * PROBE + 1, ["and an Error after it"])  # and the index keeps up with lines stored after it
    assert logs.first_error(job.pk) == 3 * PROBE + 1
