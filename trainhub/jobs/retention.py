"""Log retention, on by default: at most 1,000,000 lines kept per job.

The cap is the pool's ``log_retention_lines`` (admin), else the environment's
``TRAINHUB_LOG_RETENTION="gpu=5000000,cpu=1000000,*=0"`` — lines kept per job of each pool
(``*`` for any other pool, 0 = keep everything). Unset, it is ``*=1000000``: the byte cap
(``TRAINHUB_LOG_MAX_BYTES``, 100 MB) bounds one attempt's bytes, but not the rows — a job of short
lines, or one retried many times, stores many more; a million lines is about what 100 MB of
ordinary (~100-byte) log lines make, so a job within one attempt's byte cap keeps everything.
The executor cuts while the job runs; the worker cuts once more when it ends. A job over its cap keeps its
first lines and its newest ones; the cut middle is replaced by one system line, the marker,
at the first cut seq: "✂ lines A–B were cut ...".
By age as well, when ``TRAINHUB_LOG_RETENTION_DAYS`` is set: a job that ended longer ago loses its
log lines (``prune_by_age``: the workers' heartbeat, hourly, or ``manage.py prune_logs``), one marker
line at seq 0 saying so; its status, history, metrics and files stay. Seqs never change, so permalinks to kept
lines stay valid, and readers that meet the hole (the SSE stream) use the marker to know it
is a cut and not a write still in flight.
"""
from __future__ import annotations

import re
import time
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from trainhub.jobs.models import FINAL, Job, LogChunk, LogLine
from trainhub.pools.models import LOG_RETENTION_MINIMUM as MINIMUM
HEAD = 1_000  # first lines always kept (how the run started)
CHUNK = 50_000  # rows per DELETE, so a big cut never holds the database for long
MARKER = re.compile(r"^✂ lines (\d+)–(\d+) were cut")


def lines_kept(pool) -> int:
    """Lines kept per job of ``pool`` (a ``WorkerPool``; 0 = everything): its own
    ``log_retention_lines``, else ``TRAINHUB_LOG_RETENTION``'s rule for it."""
    return getattr(pool, "log_retention_lines", 0) or limit_for(pool.name)


def limit_for(pool: str) -> int:
    """Lines kept per job of ``pool`` (0 = everything), from ``TRAINHUB_LOG_RETENTION``."""
    raw = settings.TRAINHUB_LOG_RETENTION.strip()
    limits = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        name, _, value = part.partition("=")
        try:
            limits[name.strip()] = int(value)
        except ValueError:
            raise ImproperlyConfigured(f"TRAINHUB_LOG_RETENTION: {part!r} is not POOL=LINES, e.g. gpu=5000000") from None
    limit = limits.get(pool, limits.get("*", 0))
    if 0 < limit < MINIMUM:
        raise ImproperlyConfigured(f"TRAINHUB_LOG_RETENTION: {pool}={limit} is below {MINIMUM} lines; raise it")
    return limit


def cut_range(job_id: int) -> tuple[int, int] | None:
    """The seqs replaced by the marker (first, last), or None when nothing was cut."""
    text = (LogLine.objects.filter(job_id=job_id, stream="s", text__startswith="✂ lines ")
            .order_by("seq").values_list("text", flat=True).first())
    match = MARKER.match(text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def enforce(job_id: int, next_seq: int, limit: int, pool: str = "") -> int:
    """Cut the middle of a job's log down to ``limit`` lines; returns the rows deleted."""
    if not limit or next_seq <= limit + 1:
        return 0
    head = min(HEAD, limit // 10)
    end = next_seq - 1 - (limit - head)  # the last seq to cut; the newest lines stay
    previous = cut_range(job_id)
    start = previous[1] + 1 if previous else head + 1
    if end < start:
        return 0
    deleted = 0
    for lo in range(start, end + 1, CHUNK):
        deleted += LogLine.objects.filter(job_id=job_id, seq__gte=lo, seq__lte=min(end, lo + CHUNK - 1)).delete()[0]
    # PostgreSQL's search chunks of the cut lines (line ``head`` becomes the marker, whose chunk its write adds)
    LogChunk.objects.filter(job_id=job_id, first_seq__gte=head, last_seq__lte=end).delete()
    text = (f"✂ lines {head}–{end} were cut by the log retention policy "
            f"(pool {pool or '?'} keeps {limit:,} lines per job: the first {head:,} and the newest)")
    LogLine.objects.update_or_create(job_id=job_id, seq=head, defaults={"stream": "s", "rank": 0, "text": text})
    return deleted


#: the line that stands at seq 0 of a log deleted by age (``prune_by_age``)
PRUNED = "✂ this job's log was deleted"
PRUNE_JOBS = 100  # jobs per sweep at most ...
PRUNE_LINES = 1_000_000  # ... and about this many lines, so one sweep never holds the database for long
PRUNE_EVERY_SECONDS = 3600  # between sweeps of one process; 60 s while old logs are left over
_next_sweep: list[float] = [0.0]


def pruned_note(job_id: int) -> str:
    """The marker of a log deleted by age, or "" when the job's log is there."""
    text = LogLine.objects.filter(job_id=job_id, seq=0, stream="s").values_list("text", flat=True).first()
    return text if text and text.startswith(PRUNED) else ""


def prune_by_age(days: int | None = None, now=None) -> tuple[int, bool]:
    """Delete the log lines of jobs that ended more than ``days`` days ago (``TRAINHUB_LOG_RETENTION_DAYS``;
    0 = never), oldest first, up to ``PRUNE_JOBS`` jobs or ``PRUNE_LINES`` lines; each keeps one marker line
    at seq 0 (its ``log_lines`` becomes 1, so it is not looked at again, and a live stream of it shows the
    marker); the job, its status, history, metrics and files stay. Returns (jobs pruned, whether more wait)."""
    days = settings.TRAINHUB_LOG_RETENTION_DAYS if days is None else days
    if not days:
        return 0, False
    now = now or timezone.now()
    jobs = list(Job.objects.filter(status__in=FINAL, finished_at__lt=now - timedelta(days=days), log_lines__gt=1)
                .order_by("finished_at").values_list("pk", "log_lines", "finished_at")[:PRUNE_JOBS + 1])
    deleted = 0
    for done, (job_id, lines, finished) in enumerate(jobs):
        if done == PRUNE_JOBS or (done and deleted + lines > PRUNE_LINES):
            return done, True
        for lo in range(0, lines, CHUNK):
            deleted += LogLine.objects.filter(job_id=job_id, seq__gte=lo, seq__lt=lo + CHUNK).delete()[0]
        LogLine.objects.filter(job_id=job_id, seq__gte=lines).delete()  # any written past the count
        LogChunk.objects.filter(job_id=job_id).delete()  # PostgreSQL's search chunks; the marker's comes next
        text = (f"{PRUNED} on {now:%Y-%m-%d}: TRAINHUB_LOG_RETENTION_DAYS keeps a log {days} days after its job "
                f"ends, and this one ended on {finished:%Y-%m-%d} ({lines:,} lines). Its status, history, "
                f"metrics and files are kept.")
        LogLine.objects.update_or_create(job_id=job_id, seq=0, defaults={"stream": "s", "rank": 0, "text": text})
        Job.objects.filter(pk=job_id).update(log_lines=1)
    return len(jobs), False


def prune_if_due() -> int:
    """``prune_by_age`` at most once an hour per process (the workers' heartbeat calls it), every minute
    while a sweep leaves old logs over; returns the jobs pruned."""
    if not settings.TRAINHUB_LOG_RETENTION_DAYS or time.monotonic() < _next_sweep[0]:
        return 0
    pruned, more = prune_by_age()
    _next_sweep[0] = time.monotonic() + (60 if more else PRUNE_EVERY_SECONDS)
    return pruned
