"""A job's log, written as it runs: every line gets the next per-job sequence number, batches
go to the database and the Redis Stream (``trainhub.jobs.logs``), and nothing is lost or
stored twice while the database is briefly unavailable.

Lines wait in ``pending`` with their seqs already assigned, so a retry after an outage stores
them under the same numbers. While the database takes lines, the executor takes from the job
only what fits in ``pending`` (``room``): a job printing faster than its log is stored waits in
its own ``print`` (the pipe fills), and no line is lost. During an outage the job must not
stall on the dashboard: at most ``PENDING_MAX`` lines wait; beyond that new lines are counted,
not kept, and one marker line says how many are missing, where they are missing.

While somebody follows the log live (``logs.watched``: the job page, ``trainhub logs -f``, an API
reader), the executor stores what the job printed every 50 ms and each batch is published to the job's
Redis Stream. While nobody does, lines are not published and are stored about once per
``UNWATCHED_STORE_SECONDS``: a token bucket of ``UNWATCHED_BURST`` stores, so the first lines of a start
and a line after a quiet spell are stored at once, and a job printing 70 lines a second costs its worker one
transaction a second instead of twenty, and no stream entries (docs/BENCHMARKS.md, "2026-12-07,
06:15"). While nobody watches, the worker asks every ``WATCH_CHECK_SECONDS``, so a viewer who comes is live
within about that (what was printed before is in the database, where the live channel looks first); while
somebody does, every ``WATCHED_CHECK_SECONDS`` (the mark lasts 10 s; a viewer gone costs a second more of the
fast pace, not a lost line).
"""
from __future__ import annotations

import logging
import queue
import time

from django.db import connection

from trainhub.jobs import logs, retention
from trainhub.runs.lifecycle import DB_ERRORS, drop_connection
from trainhub.jobs.models import Job
from workers.logcap import ByteCap

log = logging.getLogger(__name__)
FLUSH_MAX = 20_000  # lines per statement: bounded, even after a burst
#: lines kept in memory while the database is unavailable; beyond it new lines are counted,
#: not kept, and a marker line says how many were dropped
PENDING_MAX = 200_000
DB_BACKOFF_MAX = 5.0  # seconds between retries while the database is unavailable
TAIL_LINES = 20
UNWATCHED_STORE_SECONDS = 1.0  # how often a log nobody follows is stored, once its burst is spent (module doc)
UNWATCHED_BURST = 3  # stores of a log nobody follows that may come at once (a start's first lines)
WATCH_CHECK_SECONDS = 0.25  # how often the worker asks Redis whether anyone follows the job's log, while nobody does
WATCHED_CHECK_SECONDS = 1.0  # and while somebody does


class DbOutage:
    """The worker's view of the database for one job: down since when, and when to retry
    (0.1 s doubling to ``DB_BACKOFF_MAX``). Shared by the log, the events and the lease."""

    def __init__(self, job_id: int):
        self.job_id = job_id
        self.backoff = 0.0
        self.retry_at = 0.0
        self.down_since: float | None = None

    def failed(self, exc: Exception, pending: int = 0) -> None:
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = now
            log.warning("job %s: database unavailable (%s); keeping %d lines and retrying", self.job_id, exc, pending)
        self.backoff = min(DB_BACKOFF_MAX, max(0.1, self.backoff * 2))
        self.retry_at = now + self.backoff
        if not connection.in_atomic_block:
            drop_connection()

    def ok(self) -> None:
        if self.down_since is not None:
            log.warning("job %s: database back after %.1f s", self.job_id, time.monotonic() - self.down_since)
        self.down_since, self.backoff, self.retry_at = None, 0.0, 0.0


class Viewers:
    """Whether anyone follows a job's log live (``logs.watched``), asked at most every ``WATCH_CHECK_SECONDS``
    (``WATCHED_CHECK_SECONDS`` once somebody does)."""

    def __init__(self, job_id: int):
        self.job_id = job_id
        self.asked = float("-inf")
        self.answer = True

    def watched(self, now: float) -> bool:
        if now - self.asked >= (WATCHED_CHECK_SECONDS if self.answer else WATCH_CHECK_SECONDS):
            self.asked, self.answer = now, logs.watched(self.job_id)
        return self.answer


class LogWriter:
    """``lines`` takes ``(stream, [(rank, text), ...])`` from any thread; ``flush`` stores them."""

    def __init__(self, job: Job, outage: DbOutage):
        self.job = job
        self.outage = outage
        self.seq = logs.next_seq(job.pk)
        # lines kept per job (0: all): the pool's setting, else TRAINHUB_LOG_RETENTION; cut while it runs
        self.retention = retention.lines_kept(job.pool)
        if 0 < self.retention < retention.MINIMUM:  # a row written past the admin's check
            self.retention = retention.MINIMUM
        self.next_cut = self.seq + max(1_000, self.retention // 10)
        self.lines: queue.Queue = queue.Queue()
        self.pending: list[tuple[int, int, str, str]] = []  # seqs assigned, not yet stored (Line-shaped)
        self.dropped = 0  # lines not kept because the pending buffer was full
        self.activity = time.monotonic()  # last output of the job (the watchdog's clock)
        self.tail: list[str] = []  # the job's last lines, to tell a full disk from other failures
        self.cap = ByteCap()  # bytes of the job's output stored per attempt
        self.viewers = Viewers(job.pk)
        self.stores, self.refilled = float(UNWATCHED_BURST), time.monotonic()  # ``due``'s token bucket

    def system(self, text: str) -> None:
        """A line of the dashboard's own ("s"), e.g. why the job stopped."""
        self.lines.put(("s", [(0, text)]))

    def room(self) -> int | None:
        """How many more lines to take from the job now: the free part of ``pending`` while the
        database is up (the rest waits in the job's pipes); None, all of them, during an outage
        (see the module doc)."""
        if self.outage.down_since is not None:
            return None
        return max(0, PENDING_MAX - len(self.pending))

    def _take(self, items: list[tuple[int, str]], stream: str) -> None:
        if len(self.pending) >= PENDING_MAX:
            self.dropped += len(items)
            return
        if self.dropped:  # room again: say where lines are missing, in seq order
            self.pending.append((self.seq, 0, "s", f"[{self.dropped} lines dropped: the database was unavailable "
                                                   f"and {PENDING_MAX} lines were already waiting]"))
            self.seq += 1
            self.dropped = 0
        self.pending.extend([(self.seq + i, rank, stream, text) for i, (rank, text) in enumerate(items)])
        self.seq += len(items)

    def _collect(self) -> None:
        while True:
            try:
                stream, items = self.lines.get_nowait()
            except queue.Empty:
                return
            if stream != "s":
                self.activity = time.monotonic()
                self.tail = (self.tail + [t for _, t in items[-TAIL_LINES:]])[-TAIL_LINES:]
                items, cut = self.cap.admit(items)
                if cut:
                    self._take(items, stream)
                    items, stream = [(0, cut)], "s"
            self._take(items, stream)

    def number(self) -> int:
        """Give the lines queued so far their seqs (they are stored by the next ``flush``); the
        seq the next line will get."""
        self._collect()
        return self.seq

    def due(self) -> bool:
        """Whether the executor's tick should store what waits: somebody follows the log live, a full
        statement's worth waits, or else the bucket of unwatched stores holds one (see the module doc)."""
        self._collect()
        if not self.pending and not self.dropped:
            return False
        now = time.monotonic()
        self.stores = min(UNWATCHED_BURST, self.stores + (now - self.refilled) / UNWATCHED_STORE_SECONDS)
        self.refilled = now
        return self.viewers.watched(now) or len(self.pending) >= FLUSH_MAX or self.stores >= 1

    def flush_due(self) -> bool:
        """``flush`` if ``due``; False while the database is unavailable."""
        return self.flush() if self.due() else True

    def flush(self) -> bool:
        """Store what the job printed (and publish it, if somebody follows the log). Returns False while
        the database is unavailable: the lines stay pending (seqs assigned, so a retry neither loses nor
        duplicates them)."""
        self._collect()
        if not self.pending and not self.dropped:
            return True
        now = time.monotonic()
        if now < self.outage.retry_at:
            return False
        live = self.viewers.watched(now)
        try:
            while self.pending:
                logs.append_lines(self.job.pk, self.pending[:FLUSH_MAX], live=live)
                del self.pending[:FLUSH_MAX]
                self.stores = max(0.0, self.stores - 1)
            if self.dropped:
                self._take([], "s")  # the marker alone
                return self.flush()
            if self.retention and self.seq >= self.next_cut:
                retention.enforce(self.job.pk, self.seq, self.retention, self.job.pool.name)
                self.next_cut = self.seq + max(1_000, self.retention // 10)
        except DB_ERRORS as exc:
            self.outage.failed(exc, len(self.pending))
            return False
        self.outage.ok()
        return True

    def drain(self, seconds: float) -> bool:
        """Flush until nothing is pending or ``seconds`` pass (the job's end, a kill)."""
        deadline = time.monotonic() + seconds
        while not self.flush():
            if time.monotonic() >= deadline:
                log.error("job %s: %d log lines could not be stored", self.job.pk, len(self.pending))
                return False
            time.sleep(0.1)
        return True
