"""Log and metric storage: the database is the durable copy, a Redis Stream the live one."""
from __future__ import annotations

import logging
from functools import lru_cache
from typing import NamedTuple

import redis
from django.conf import settings

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


def read_lines(job_id: int, after: int = -1, limit: int = 1000) -> list[Line]:
    rows = (LogLine.objects.filter(job_id=job_id, seq__gt=after).order_by("seq")
            .values_list("seq", "rank", "stream", "text")[:limit])
    return [Line(*row) for row in rows]


def tail_lines(job_id: int, limit: int = 500) -> list[Line]:
    rows = (LogLine.objects.filter(job_id=job_id).order_by("-seq")
            .values_list("seq", "rank", "stream", "text")[:limit])
    return [Line(*row) for row in reversed(rows)]


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


