"""Log and metric storage: the database is the durable copy, a Redis Stream the live one."""
from __future__ import annotations

import json
import logging
import re
import threading
from functools import lru_cache
from typing import NamedTuple

import redis
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from trainhub.jobs import ansi, metriccap
from trainhub.jobs.models import Job, LogChunk, LogLine, Metric

log = logging.getLogger(__name__)
#: stream entries kept per job (each up to ENTRY_LINES lines); older lines come from the DB
STREAM_MAXLEN = 2_000
ENTRY_LINES = 200
STREAM_TTL = 24 * 3600  # a finished job's live stream goes away a day after its last line
#: how long a reader's mark that it follows a job's log live lasts: the live channel renews it about once a
#: second while it has viewers, a REST read of a running job's log sets it (``mark_watched``)
WATCH_SECONDS = 10


class Line(NamedTuple):
    seq: int
    rank: int
    stream: str
    text: str


def stream_key(job_id: int) -> str:
    return f"trainhub:log:{job_id}"


def watch_key(job_id: int) -> str:
    """Set while someone follows the job's log live; the worker publishes lines to the job's stream, and
    stores them every 50 ms, only then (``workers.logwriter.Viewers``)."""
    return f"trainhub:log-watch:{job_id}"


def mark_watched(job_id: int) -> None:
    """Say that a reader follows the job's log now (best effort: without Redis the worker stores at the fast
    pace anyway, see ``watched``)."""
    try:
        redis_client().set(watch_key(job_id), 1, ex=WATCH_SECONDS)
    except redis.RedisError as exc:
        log.info("could not mark job %s's log as followed: %s", job_id, exc)


def watched(job_id: int) -> bool:
    """Whether someone has followed the job's log live in the last ``WATCH_SECONDS``. True when Redis cannot
    say: then readers poll the database, which should stay as fresh as before."""
    try:
        return bool(redis_client().exists(watch_key(job_id)))
    except redis.RedisError:
        return True


@lru_cache(maxsize=1)
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2)


def append_lines(job_id: int, lines: list[Line] | list[tuple[int, int, str, str]], *, live: bool = True) -> None:
    """Store a batch durably (idempotent per seq), then publish it live (best effort; not when ``live`` is
    False: nobody follows the job, ``watched``, and a reader who comes finds the lines in the database).

    One statement per batch and one stream entry per ``ENTRY_LINES`` lines keep a job printing
    100k lines/s cheap; ORM objects per line cost ten times more. On PostgreSQL the batch goes in
    with ``COPY``: ``executemany`` cost the worker ~17 µs a line, ``COPY`` ~4. ``COPY`` cannot skip a
    line already stored (a retry after an outage whose commit did land, a worker fenced off
    mid-batch), so a batch it refuses for a duplicate is stored again line by line, skipping those.

    Batches of other threads of this process that wait meanwhile (a worker running many jobs) are
    stored in the same transaction: see ``_GroupCommit``. Raises what storing raised for this batch.
    """
    if not lines:
        return
    batch = _Batch(job_id, lines, live)
    if connection.in_atomic_block:  # the caller's transaction: other threads' lines must not ride on it
        _write([batch])
    else:
        _GROUP.store(batch)
    if batch.error is not None:
        raise batch.error


class _Batch:
    __slots__ = ("job_id", "lines", "live", "error", "done", "turn")

    def __init__(self, job_id: int, lines: list, live: bool = True):
        self.job_id = job_id
        self.lines = lines
        self.live = live  # published to the job's Redis Stream once stored
        self.error: BaseException | None = None
        self.done = False
        self.turn = threading.Event()  # set when stored (``done``) or when it is this thread's turn to store


class _GroupCommit:
    """Group commit for the threads of one process: a thread whose batch arrives while another thread is
    storing waits, and the next thread to store takes every batch waiting then, in one transaction, and
    publishes them in one Redis round trip. A thread alone stores its batch at once, as before: nothing
    waits for company. One worker running 100 jobs stored ~1,000 transactions a second, each ~1 ms of its
    one core (BEGIN, the insert, the search index's catch-up, the job's line count, the publish); grouped,
    those costs are paid once per group (docs/BENCHMARKS.md, "Live logs")."""

    def __init__(self):
        self.lock = threading.Lock()
        self.waiting: list[_Batch] = []
        self.busy = False  # a thread is storing a group; the next one is handed the turn when it is done

    def store(self, batch: _Batch) -> None:
        with self.lock:
            self.waiting.append(batch)
            lead, self.busy = not self.busy, True
        if not lead:
            batch.turn.wait()
            if batch.done:
                return
        with self.lock:  # this thread's turn: every batch waiting now, its own among them
            group, self.waiting = self.waiting, []
        try:
            _write(group)
        finally:
            with self.lock:
                if self.waiting:
                    self.waiting[0].turn.set()  # not done: that thread stores the next group
                else:
                    self.busy = False


_GROUP = _GroupCommit()


def _write(group: list[_Batch]) -> None:
    """Store ``group`` in one transaction and publish it; each batch's ``error`` is what failed for it.
    A refusal of the whole group (an integrity error: e.g. a job deleted while it printed) is retried
    batch by batch, so one job's failure is not the others'."""
    try:
        try:
            _store(group)
        except IntegrityError:
            if len(group) == 1:
                raise
            for batch in group:
                _write([batch])
            return
        for batch in group:
            batch.done = True
        _publish(group)
    except BaseException as exc:  # noqa: BLE001 — handed to each batch's thread, raised there
        for batch in group:
            if not batch.done:
                batch.error, batch.done = exc, True
    finally:
        for batch in group:
            batch.turn.set()


_COLUMNS = ("job_id", "seq", "rank", "stream", "text", "at")


def _store(group: list[_Batch]) -> None:
    now = connection.ops.adapt_datetimefield_value(timezone.now())  # once, not per row
    rows = [(b.job_id, seq, rank, stream, text, now) for b in group for seq, rank, stream, text in b.lines]
    counts = [(b.lines[-1][0] + 1, b.job_id) for b in group]  # a job's lines come one batch at a time
    if connection.vendor == "postgresql":
        try:
            _insert(rows, counts, copy=True)
        except IntegrityError:  # a seq already stored: the idempotent statement below skips it
            _insert(rows, counts, copy=False)
    else:
        _insert(rows, counts, copy=False)


def _insert(rows: list[tuple], counts: list[tuple[int, int]], *, copy: bool) -> None:
    """The rows and each job's line count ``(count, job_id)``, in one transaction."""
    q = connection.ops.quote_name
    table, columns = q(LogLine._meta.db_table), ", ".join(q(c) for c in _COLUMNS)
    with transaction.atomic():
        with connection.cursor() as cursor:
            if connection.vendor == "sqlite":  # holds the write lock from here: the ids past this are the group's
                cursor.execute(f"SELECT coalesce(max(id), 0) FROM {table}")
                before = cursor.fetchone()[0]
            if copy:  # psycopg's own call: its errors become Django's (IntegrityError, OperationalError) here
                with connection.wrap_database_errors, cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as out:
                    for row in rows:
                        out.write_row(row)
            else:
                cursor.executemany(_insert_new_sql(LogLine, _COLUMNS, unique=("job_id", "seq")), rows)
            if connection.vendor == "sqlite":
                fts_catch_up(FTS_CATCH_UP)  # the search index, in bulk (PostgreSQL's is kept by PostgreSQL)
                _count_sqlite(cursor, table, before, counts)
            else:  # each job's line count; a plain statement, not the ORM's (1–2 ms of query building each)
                cursor.executemany(f"UPDATE {q(Job._meta.db_table)} SET {q('log_lines')} = %s "
                                   f"WHERE {q('id')} = %s AND {q('log_lines')} < %s",
                                   [(n, job_id, n) for n, job_id in counts])


def _insert_new_sql(model, columns: tuple[str, ...], unique: tuple[str, ...]) -> str:
    """``INSERT`` of rows of ``columns`` into ``model``'s table that skips a row its ``unique`` columns
    already hold (a retried batch stores nothing twice); a plain statement, for ``executemany``."""
    q = connection.ops.quote_name
    return (f"INSERT INTO {q(model._meta.db_table)} ({', '.join(q(c) for c in columns)}) "
            f"VALUES ({', '.join(['%s'] * len(columns))}) ON CONFLICT ({', '.join(q(c) for c in unique)}) DO NOTHING")


def _count_sqlite(cursor, table: str, before: int, counts: list[tuple[int, int]]) -> None:
    """Each job's line count and line id range on SQLite (its search asks FTS5 for that range only: jobs/0011),
    from the rows past id ``before``: this transaction's, as it holds SQLite's write lock. ``+job_id``: those rows
    by id, not the job's whole (job, seq) index."""
    cursor.execute(f"SELECT job_id, min(id), max(id) FROM {table} WHERE id > %s GROUP BY +job_id", [before])
    ids = {job_id: (first, last) for job_id, first, last in cursor.fetchall()}
    cursor.executemany(f"UPDATE {connection.ops.quote_name(Job._meta.db_table)} SET log_lines = max(log_lines, %s), "
                       f"log_first_id = coalesce(log_first_id, %s), log_last_id = coalesce(%s, log_last_id) "
                       f"WHERE id = %s", [(n, *ids.get(job_id, (None, None)), job_id) for n, job_id in counts])


def _publish(group: list[_Batch]) -> None:
    """The group's live lines on their jobs' Redis Streams, in one round trip."""
    group = [batch for batch in group if batch.live]
    if not group:
        return
    try:
        pipe = redis_client().pipeline(transaction=False)
        for batch in group:
            _add_entries(pipe, batch.job_id, batch.lines)
        pipe.execute()
    except redis.RedisError as exc:  # readers fall back to the database
        log.warning("live log publish for jobs %s failed: %s", sorted({b.job_id for b in group}), exc)


def _add_entries(pipe, job_id: int, lines: list[Line]) -> None:
    """Add lines to the job's Redis Stream: each entry holds up to ``ENTRY_LINES`` lines, ``seq`` and
    ``last`` (its first and last line's) and ``lines``, the JSON array the live channel sends as it is
    (``entry_json``)."""
    for start in range(0, len(lines), ENTRY_LINES):
        chunk = lines[start:start + ENTRY_LINES]
        pipe.xadd(stream_key(job_id), {"seq": chunk[0][0], "last": chunk[-1][0], "lines": entry_json(chunk)},
                  maxlen=STREAM_MAXLEN, approximate=True)
    pipe.expire(stream_key(job_id), STREAM_TTL)


#: a control character (``ansi.CONTROL``: colour codes among them) as ``json.dumps`` escapes it
_JSON_CONTROL = re.compile(r"\\(?:[bfr]|u00[01][0-9a-f]|u007f)")
_js = json.encoder.encode_basestring_ascii  # a JSON string literal, as json.dumps writes it
_STREAMS = {s: _js(s) for s in "oes"}


def line_json(line: Line) -> str:
    """One line as an element of a live ``lines`` event's array: ``[seq, rank, stream, text]``, and the text
    as escaped HTML (``ansi.to_html``: colours as spans) for a line with control characters, which a browser
    would not show as they are. Written as ``json.dumps(..., separators=(",", ":"))`` would, without a list
    and an encoder per line: ints as they are, strings through json's own C escaper."""
    seq, rank, stream, text = line
    html = f",{_js(ansi.to_html(text))}" if ansi.CONTROL.search(text) else ""
    return f"[{seq:d},{rank:d},{_STREAMS.get(stream) or _js(stream)},{_js(text)}{html}]"


def entry_json(lines: list[Line]) -> str:
    """The lines as a live ``lines`` event carries them: the JSON array of their ``line_json``. Written once
    by the worker that stores the lines, so a web server passes them on to every viewer without touching a
    line."""
    data = json.dumps(lines, separators=(",", ":"))  # a Line is a tuple: an array, as line_json writes it
    if _JSON_CONTROL.search(data):  # colours or other controls somewhere (or a false alarm: "\\r" as text)
        data = f"[{','.join(map(line_json, lines))}]"
    return data


class Entry:
    """Consecutive lines ``first``..``last`` of one stream entry; ``frame`` is the SSE ``lines`` event of
    all of them, made once for every viewer. ``lines()`` decodes them on each call and keeps nothing: a web
    server's hub holds entries, bounded by their frames' bytes, and only a filtered viewer, or one resuming
    inside an entry, asks for its lines."""

    __slots__ = ("first", "last", "frame")

    def __init__(self, first: int, last: int, data: bytes):
        self.first, self.last = first, last
        self.frame = b"event: lines\nid: %d\ndata: %s\n\n" % (last, data)

    def lines(self) -> list[Line]:
        return [Line(*line[:4]) for line in json.loads(self.frame[self.frame.index(b"\ndata: ") + 7:-2])]

    @classmethod
    def of(cls, lines: list[Line]) -> Entry:
        return cls(lines[0][0], lines[-1][0], entry_json(lines).encode())


def decode_entry(fields: dict) -> Entry:
    """One stream entry (see ``_add_entries``); also one a worker of the version before wrote (``lines``
    as ``[[rank, stream, text], ...]`` without ``last``), a day at most after an upgrade."""
    first = int(fields[b"seq"])
    if b"last" in fields:
        return Entry(first, int(fields[b"last"]), fields[b"lines"])
    return Entry.of([Line(first + i, rank, stream, text)
                     for i, (rank, stream, text) in enumerate(json.loads(fields[b"lines"]))])


FIELDS = ("seq", "rank", "stream", "text")
#: what "jump to first error" looks for (case-insensitive substrings)
ERROR_MARKERS = ("traceback (most recent call last)", "error", "exception")


def _lines(job_id: int, rank: int | None = None, stream: str | None = None):
    qs = LogLine.objects.filter(job_id=job_id)
    if rank is not None:
        qs = qs.filter(rank=rank)
    if stream:
        qs = qs.filter(stream=stream)
    return qs


def read_lines(job_id: int, after: int = -1, limit: int = 1000, *, rank: int | None = None,
               stream: str | None = None) -> list[Line]:
    rows = _lines(job_id, rank, stream).filter(seq__gt=after).order_by("seq").values_list(*FIELDS)[:limit]
    return [Line(*row) for row in rows]


def read_before(job_id: int, before: int, limit: int = 500, *, rank: int | None = None,
                stream: str | None = None) -> list[Line]:
    """The ``limit`` lines just before ``before``, oldest first (paging backwards)."""
    rows = _lines(job_id, rank, stream).filter(seq__lt=before).order_by("-seq").values_list(*FIELDS)[:limit]
    return [Line(*row) for row in reversed(rows)]


def tail_lines(job_id: int, limit: int = 500, *, rank: int | None = None, stream: str | None = None) -> list[Line]:
    rows = _lines(job_id, rank, stream).order_by("-seq").values_list(*FIELDS)[:limit]
    return [Line(*row) for row in reversed(rows)]


#: the SQLite FTS5 index of the lines' text (migration jobs/0006); PostgreSQL's is pg_trgm over chunks of
#: lines (``LogChunk``, jobs/0009)
FTS_TABLE = "jobs_logline_fts"
FTS_STATE = f"{FTS_TABLE}_state"  # indexed_to: the last line id the index holds
#: lines waiting before the writer adds them to the SQLite index in one statement (~1–4 µs a line, where
#: one at a time cost ~20: migration jobs/0006); search reads the lines past the index's mark directly
FTS_CATCH_UP = 20_000
#: seqs looked at in order before the trigram index is asked: a query that matches often is answered
#: there, where the index would list its matches in every job's lines (SQLite) or have every chunk of the job
#: rechecked (PostgreSQL). SQLite reads these lines; PostgreSQL reads their ~20 chunks first
PROBE = 10_000


def fts_ready() -> bool:
    """Whether this database is SQLite with the FTS5 log index and the triggers that keep it true."""
    if connection.vendor != "sqlite":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM sqlite_master WHERE (type = 'trigger' AND name IN (%s, %s)) "
                       "OR (type = 'table' AND name = %s)", [f"{FTS_TABLE}_delete", f"{FTS_TABLE}_update", FTS_STATE])
        return cursor.fetchone()[0] == 3


def fts_catch_up(at_least: int = 1) -> int:
    """Add the lines past the SQLite index's mark to it when ``at_least`` of them wait; returns how many.
    Call it inside a transaction that has written (it then holds SQLite's write lock, so no other writer
    moves the mark meanwhile)."""
    if not fts_ready():
        return 0
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT indexed_to, (SELECT coalesce(max(id), 0) FROM jobs_logline) FROM {FTS_STATE}")
        done, last = cursor.fetchone()
        if last < done:  # ids started again (``manage.py flush`` resets them): index what is there afresh
            cursor.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')")
            cursor.execute(f"UPDATE {FTS_STATE} SET indexed_to = %s", [last])
            return last
        if last - done < max(at_least, 1):
            return 0
        cursor.execute(f"INSERT INTO {FTS_TABLE}(rowid, text) SELECT id, text FROM jobs_logline "
                       f"WHERE id > %s AND id <= %s", [done, last])
        cursor.execute(f"UPDATE {FTS_STATE} SET indexed_to = %s", [last])
    return last - done


def _fts_query(text: str) -> str:
    """An FTS5 query for lines holding every trigram of ``text`` (case-folded): a superset of the lines
    containing ``text`` — Django's ``icontains`` on SQLite is then applied to them. (The index keeps no
    positions, detail=none, so a phrase cannot be asked for.)"""
    trigrams = dict.fromkeys(text[i:i + 3] for i in range(len(text) - 2))
    return "(" + " AND ".join('"' + t.replace('"', '""') + '"' for t in trigrams) + ")"


def _fts_lines(match: str, job_id: int, where: list[str], params: list, limit: int) -> list[tuple]:
    """The first ``limit`` lines (seq, rank, stream, text) of ``job_id`` passing ``where``: among the
    index's matches for ``match`` (``CROSS JOIN`` makes the index drive; SQLite otherwise walked the
    job's lines and probed the match list for each), and among the lines past the index's mark."""
    cond = " AND ".join(where)
    columns = "l.seq, l.rank, l.stream, l.text"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT indexed_to, j.log_first_id, j.log_last_id FROM {FTS_STATE}, {Job._meta.db_table} AS j "
                       f"WHERE j.id = %s", [job_id])
        found = cursor.fetchone()
        if found is None:  # no such job
            return []
        mark, first, last = found
        # the unary + keeps SQLite on the id range (at most FTS_CATCH_UP lines or so), not the job's lines
        cursor.execute(f"SELECT {columns} FROM jobs_logline AS l WHERE l.id > %s AND +l.job_id = %s AND {cond} "
                       f"ORDER BY l.seq LIMIT %s", [mark, job_id, *params, limit])
        late = cursor.fetchall()
        # the job's line id range (jobs/0011): FTS5 seeks to it instead of listing every job's matches
        cursor.execute(f"SELECT {columns} FROM {FTS_TABLE} CROSS JOIN jobs_logline AS l ON l.id = {FTS_TABLE}.rowid "
                       f"WHERE {FTS_TABLE} MATCH %s AND {FTS_TABLE}.rowid >= %s AND {FTS_TABLE}.rowid <= %s "
                       f"AND l.job_id = %s AND {cond} ORDER BY l.seq LIMIT %s",
                       [match, first or 0, last if last is not None else mark, job_id, *params, limit])
        indexed = cursor.fetchall()
    return sorted({row[0]: row for row in indexed + late}.values())[:limit]  # the mark may move in between


def _like(text: str) -> str:
    """Django's ``icontains`` on SQLite: ``LIKE`` (ASCII case-insensitive) with %, _ and \\ escaped."""
    return f"%{connection.ops.prep_for_like_query(text)}%"


def chunks_ready() -> bool:
    """Whether this database is PostgreSQL with the triggers that keep ``LogChunk`` (jobs/0009) true."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'jobs_logline'::regclass AND tgname IN (%s, %s)",
                       list(CHUNK_TRIGGERS))
        return cursor.fetchone()[0] == len(CHUNK_TRIGGERS)


CHUNK_TRIGGERS = ("jobs_logchunk_insert", "jobs_logchunk_update")
#: matching chunks whose lines are read in the first look; each further look reads twice as many (up to 256)
CHUNK_WINDOW = 16
#: the planner's cost of an operator in the chunk queries: 100x PostgreSQL's default (0.0025), as a LIKE over
#: a chunk's ~12 kB of text is to one over a short value (10x was enough on the bench's database)
CHUNK_OPERATOR_COST = 0.25


def _chunk_lines(job_id: int, patterns: list[str], lines, after: int, limit: int, probe: int) -> list[tuple]:
    """The first ``limit`` rows of ``lines`` (a queryset of ``job_id``'s lines, already filtered for the
    match) past seq ``after``, read only in the seq ranges of the chunks whose text holds one of
    ``patterns`` (case-insensitive, as ``icontains``).

    Two looks, each complete for its seqs, so their rows come out in seq order:
    - the chunks of the next ``probe`` seqs, taken in seq order through ``logchunk_job_first_seq`` (jobs/0010;
      ~20 rows for 10,000 lines) and only then matched: a query that matches often is answered here. Through
      the trigram index every matching chunk of the job would be rechecked (~50 ms for 2,000 chunks), so the
      look is a ``MATERIALIZED`` CTE, which the planner cannot answer from that index;
    - if rows are still missing, the chunks past them through the trigram index."""
    table, like = LogChunk._meta.db_table, " OR ".join(["text LIKE UPPER(%s)"] * len(patterns))
    likes = list(map(_like, patterns))
    # ``::bigint``: Django inlines the id as an integer literal, and btree_gin's operators do not compare
    # bigint with integer, so without the cast the trigram index left the job out of its condition and
    # rechecked every job's matching chunks (docs/BENCHMARKS.md, "Log search")
    with connection.cursor() as cursor:
        cursor.execute(f"WITH near AS MATERIALIZED (SELECT first_seq, last_seq, text FROM {table} "
                       f"WHERE job_id = %s::bigint AND first_seq <= %s AND last_seq > %s) "
                       f"SELECT first_seq, last_seq FROM near WHERE {like} ORDER BY first_seq",
                       [job_id, after + probe, after, *likes])
        near = cursor.fetchall()
    rows = _lines_in(lines.filter(seq__gt=after, seq__lte=after + probe), _merged(near), limit)
    if len(rows) >= limit:
        return rows
    with transaction.atomic(), connection.cursor() as cursor:
        # The planner prices a LIKE on a chunk (~12 kB, compressed out of line) as one on a short value, so
        # it chose to match every chunk of the job, or of the table, over asking the trigram index: a
        # sequential scan of 4,000 chunks took 100-160 ms, the job's 2,000 through its id 130-400 ms, against
        # 0.1-1 ms through the index for both the job and the text. Priced 100x, the index is asked
        # (docs/BENCHMARKS.md, "Log search"); the lines' own queries keep the default.
        cursor.execute(f"SET LOCAL cpu_operator_cost = {CHUNK_OPERATOR_COST}")
        cursor.execute(f"SELECT first_seq, last_seq FROM {table} WHERE job_id = %s::bigint AND last_seq > %s "
                       f"AND ({like}) ORDER BY first_seq", [job_id, after + probe, *likes])
        far = cursor.fetchall()
        cursor.execute("SET LOCAL cpu_operator_cost TO DEFAULT")  # for the rest of a transaction around this
    return rows + _lines_in(lines.filter(seq__gt=after + probe), _merged(far), limit - len(rows))


def _merged(ranges: list[tuple[int, int]]) -> list[list[int]]:
    """Seq ranges sorted by their start, overlapping or adjacent ones joined (a line may be in two chunks: an
    updated line, a line stored during migration jobs/0009)."""
    merged: list[list[int]] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged


def _lines_in(lines, ranges: list[list[int]], limit: int) -> list[tuple]:
    """The first ``limit`` rows of ``lines`` within ``ranges`` (sorted, disjoint), by seq, read a window of
    ranges at a time until ``limit`` rows are found."""
    rows, start, width = [], 0, CHUNK_WINDOW
    while start < len(ranges) and len(rows) < limit:
        window, start, width = ranges[start:start + width], start + width, min(2 * width, 256)
        within = Q()
        for lo, hi in window:
            within |= Q(seq__gte=lo, seq__lte=hi)
        rows += lines.filter(within).order_by("seq").values_list(*FIELDS)[:limit - len(rows)]
    return rows


def search_lines(job_id: int, query: str, after: int = -1, limit: int = 100, *, rank: int | None = None,
                 stream: str | None = None) -> list[Line]:
    """Lines containing ``query`` (case-insensitive) across the whole stored log, by seq.

    Through the search index: PostgreSQL's chunks of lines (jobs/0009), the next ``PROBE`` seqs' chunks in seq
    order first; SQLite's FTS5 (jobs/0006), after reading the next ``PROBE`` lines in seq order (a query that
    matches often is answered there, where the index would list its matches in every job's lines first).
    Queries under 3 characters (no trigram) and databases without the index scan the job's lines."""
    if "\x00" in query and connection.vendor == "postgresql":
        return []  # PostgreSQL's text holds no NUL, and its driver refuses one in a parameter
    matching = _lines(job_id, rank, stream).filter(text__icontains=query)
    if len(query) < 3 or "\x00" in query or not (fts_ready() or chunks_ready()):  # FTS5 refuses a NUL
        rows = matching.filter(seq__gt=after).order_by("seq").values_list(*FIELDS)[:limit]
        return [Line(*row) for row in rows]
    if connection.vendor == "postgresql":
        return [Line(*row) for row in _chunk_lines(job_id, [query], matching, after, limit, PROBE)]
    rows = list(matching.filter(seq__gt=after, seq__lte=after + PROBE).order_by("seq").values_list(*FIELDS)[:limit])
    if len(rows) < limit:
        where, params = ["l.seq > %s", "l.text LIKE %s ESCAPE '\\'"], [after + PROBE, _like(query)]
        for column, value in (("rank", rank), ("stream", stream or None)):
            if value is not None:
                where.append(f"l.{column} = %s")
                params.append(value)
        rows += _fts_lines(_fts_query(query), job_id, where, params, limit - len(rows))
    return [Line(*row) for row in rows]


#: lines "first error" reads in seq order before it asks the search index
FIRST_ERROR_PROBE = PROBE


def first_error(job_id: int) -> int | None:
    """The seq of the first line holding an error marker.

    A planner answers ``ORDER BY seq LIMIT 1`` by walking the job's lines in order, hoping for an early
    match: for an error at 90 % of a 1,000,000-line log that read 900,000 rows (6 s, docs/BENCHMARKS.md
    "Log search"). So the first ``FIRST_ERROR_PROBE`` seqs are looked at in order (a log full of "error"
    answers there) and the rest through the search index: on PostgreSQL both through the chunks
    (jobs/0009), whose first matching range in seq order holds the answer; on SQLite the lines themselves,
    then FTS5 (jobs/0006)."""
    match = Q()
    for marker in ERROR_MARKERS:
        match |= Q(text__icontains=marker)
    matches = LogLine.objects.filter(match, job_id=job_id)
    if not (fts_ready() or chunks_ready()):
        return matches.order_by("seq").values_list("seq", flat=True).first()
    if connection.vendor == "postgresql":
        found = _chunk_lines(job_id, list(ERROR_MARKERS), matches, -1, 1, FIRST_ERROR_PROBE)
        return found[0][0] if found else None
    first = matches.filter(seq__lt=FIRST_ERROR_PROBE).order_by("seq").values_list("seq", flat=True).first()
    if first is not None:
        return first
    fts_query = " OR ".join(_fts_query(marker) for marker in ERROR_MARKERS)
    where = ["l.seq >= %s", "(" + " OR ".join(["l.text LIKE %s ESCAPE '\\'"] * len(ERROR_MARKERS)) + ")"]
    first_lines = _fts_lines(fts_query, job_id, where, [FIRST_ERROR_PROBE, *map(_like, ERROR_MARKERS)], 1)
    return first_lines[0][0] if first_lines else None


def iter_all(job_id: int, chunk: int = 5000):
    """Every stored line in seq order, a chunk at a time (keyset paging, bounded memory)."""
    after = -1
    while True:
        lines = read_lines(job_id, after=after, limit=chunk)
        if not lines:
            return
        yield lines
        after = lines[-1].seq


def has_ranks(job_id: int) -> bool:
    return LogLine.objects.filter(job_id=job_id, rank__gt=0).exists()


def record_metrics(job_id: int, step: int, values: dict[str, float]) -> None:
    record_metric_rows(job_id, [(step, values)])


def record_metric_rows(job_id: int, steps: list[tuple[int, dict[str, float]]]) -> None:
    """Store the metrics of several steps in one statement (idempotent per step and name): the
    executor reads a second of a job's events at a time, often a dozen metrics events. Past
    ``TRAINHUB_METRIC_MAX_POINTS`` points the job's series are thinned (``metriccap``)."""
    if metriccap.full(job_id):
        return
    # A plain statement, not ``bulk_create``: a model instance per point cost the worker ~30 µs (its field
    # defaults: a clock read each), and a job logging every few ms stores hundreds of points a second, CPU
    # taken from the training beside it (docs/BENCHMARKS.md, "2026-12-07").
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    rows = [(job_id, step, k[:100], v, now) for step, values in steps for k, v in values.items()]
    with connection.cursor() as cursor:
        cursor.executemany(_insert_new_sql(Metric, ("job_id", "step", "name", "value", "at"),
                                           unique=("job_id", "name", "step")), rows)
    metriccap.stored(job_id, len(rows))


def record_progress(job_id: int, step: int, total_steps: int) -> None:
    Job.objects.filter(pk=job_id).update(step=step, total_steps=max(total_steps, 0))


def metric_series(job_id: int) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    for name, step, value in (Metric.objects.filter(job_id=job_id).order_by("name", "step")
                              .values_list("name", "step", "value")):
        series.setdefault(name, []).append((step, value))
    return series


def next_seq(job_id: int) -> int:
    return Job.objects.filter(pk=job_id).values_list("log_lines", flat=True).first() or 0


