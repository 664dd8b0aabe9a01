"""Log and metric storage: the database is the durable copy, a Redis Stream the live one."""
from __future__ import annotations

import logging
from functools import lru_cache
from typing import NamedTuple

import redis
from django.conf import settings
from django.db.models import Q

from trainhub.jobs.models import Job, LogLine, Metric

log = logging.getLogger(__name__)
STREAM_MAXLEN = 10_000


class Line(NamedTuple):
    seq: int
    rank: int
    stream: str
    text: str


def stream_key(job_id: int) -> str:
    return f"trainhub:log:{job_id}"


@lru_cache(maxsize=1)
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2)


def append_lines(job_id: int, lines: list[Line]) -> None:
    """Store a batch durably (idempotent per seq), then publish it live (best effort)."""
    if not lines:
        return
    LogLine.objects.bulk_create(
        [LogLine(job_id=job_id, seq=l.seq, rank=l.rank, stream=l.stream, text=l.text) for l in lines],
        ignore_conflicts=True, batch_size=1000)
    Job.objects.filter(pk=job_id, log_lines__lt=lines[-1].seq + 1).update(log_lines=lines[-1].seq + 1)
    try:
        pipe = redis_client().pipeline(transaction=False)
        for l in lines:
            pipe.xadd(stream_key(job_id), {"seq": l.seq, "rank": l.rank, "stream": l.stream, "text": l.text},
                      maxlen=STREAM_MAXLEN, approximate=True)
        pipe.execute()
    except redis.RedisError as exc:  # readers fall back to the database
        log.warning("live log publish for job %s failed: %s", job_id, exc)


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


def search_lines(job_id: int, query: str, after: int = -1, limit: int = 100, *, rank: int | None = None,
                 stream: str | None = None) -> list[Line]:
    """Lines containing ``query`` (case-insensitive) across the whole stored log, by seq."""
    rows = (_lines(job_id, rank, stream).filter(seq__gt=after, text__icontains=query).order_by("seq")
            .values_list(*FIELDS)[:limit])
    return [Line(*row) for row in rows]


def first_error(job_id: int) -> int | None:
    match = Q()
    for marker in ERROR_MARKERS:
        match |= Q(text__icontains=marker)
    return (LogLine.objects.filter(match, job_id=job_id).order_by("seq")
            .values_list("seq", flat=True).first())


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
    Metric.objects.bulk_create([Metric(job_id=job_id, step=step, name=k[:100], value=v) for k, v in values.items()],
                               ignore_conflicts=True)


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


