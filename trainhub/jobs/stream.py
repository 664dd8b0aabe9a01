"""``GET /jobs/{id}/logs/stream``: a job's log as Server-Sent Events.

Each event is one line: ``id:`` is its seq, ``data:`` JSON ``{seq, rank, stream, text, html}``
(``html`` is the escaped, colour-rendered row). The client resumes from ``Last-Event-ID``
or ``?after=SEQ``. Lines come live from the Redis Stream; anything the stream does not
hold (older than its window, or lost with a Redis restart) comes from the database.
The sequence sent is gap-free and duplicate-free: a line is sent only when it is exactly
the next seq, and a jump forward is filled from the database first. When the job is
final and every stored line has been sent, an ``end`` event closes the stream.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time

import redis
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import reverse

from trainhub.jobs import ansi, logs
from trainhub.jobs.models import FINAL, Job
from trainhub.jobs.services import jobs_visible_to

log = logging.getLogger(__name__)
BLOCK_MS = 1000
KEEPALIVE_SECONDS = 15
DB_BATCH = 1000


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _visible_job(user, job_id: int) -> Job:
    job = jobs_visible_to(user).filter(pk=job_id).first()
    if job is None:
        raise Http404("no such job")
    return job


def _status(job_id: int) -> str:
    return Job.objects.filter(pk=job_id).values_list("status", flat=True).first() or "cancelled"


class Follower:
    """Produces SSE frames for one client, starting after ``cursor``."""

    def __init__(self, job_id: int, cursor: int, href: str, rank: int | None = None, stream: str | None = None):
        self.job_id = job_id
        self.cursor = cursor  # last seq sent (or skipped by a filter)
        self.href = href
        self.rank = rank
        self.stream = stream
        self.key = logs.stream_key(job_id)
        self.redis: aioredis.Redis | None = None
        self.redis_id: str | None = None  # None: (re)attach to the live stream first

    def frame(self, line: logs.Line) -> str:
        self.cursor = line.seq
        if (self.rank is not None and line.rank != self.rank) or (self.stream and line.stream != self.stream):
            return ""
        data = json.dumps({"seq": line.seq, "rank": line.rank, "stream": line.stream, "text": line.text,
                           "html": ansi.row(line, href=self.href)})
        return f"id: {line.seq}\ndata: {data}\n\n"

    async def backfill(self, strict: bool = True) -> tuple[list[str], bool]:
        """Stored lines after the cursor, from the database; the flag says whether more wait.

        ``strict`` stops at a hole in the stored sequence instead of skipping it (a hole can
        only be a write still in flight); once the job is final nothing more can arrive.
        """
        lines = await sync_to_async(logs.read_lines, thread_sensitive=False)(self.job_id, self.cursor, DB_BATCH)
        out = []
        for line in lines:
            if strict and line.seq != self.cursor + 1:
                return [f for f in out if f], False
            out.append(self.frame(line))
        return [f for f in out if f], len(lines) == DB_BATCH

    async def attach(self) -> None:
        """Remember where the live stream ends now; everything before it is in the database."""
        if self.redis is None:
            self.redis = aioredis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2,
                                                 socket_timeout=BLOCK_MS / 1000 + 5)
        last = await self.redis.xrevrange(self.key, count=1)
        self.redis_id = last[0][0].decode() if last else "0-0"

    async def live(self) -> tuple[list[str], bool]:
        """Frames from the Redis Stream; the flag says whether a hole needs the database."""
        reply = await self.redis.xread({self.key: self.redis_id}, count=20, block=BLOCK_MS)
        out, hole = [], False
        for _key, entries in reply or ():
            for entry_id, fields in entries:
                self.redis_id = entry_id.decode()
                for line in logs.decode_entry(fields):
                    if line.seq <= self.cursor:
                        continue  # already sent (from the database)
                    if line.seq != self.cursor + 1:
                        hole = True
                        break
                    out.append(self.frame(line))
                if hole:
                    break
            if hole:
                break
        return [f for f in out if f], hole

    async def close(self) -> None:
        if self.redis is not None:
            try:
                await self.redis.aclose()
            except Exception:  # the connection may already be gone
                pass
            self.redis = None

    async def events(self):
        last_write = time.monotonic()
        need_db = True
        yield "retry: 1000\n\n"
        try:
            while True:
                status = await sync_to_async(_status, thread_sensitive=False)(self.job_id)
                final = status in FINAL
                if self.redis_id is None:
                    need_db = True
                    try:
                        await self.attach()  # before reading the database, so nothing falls between
                    except (redis.RedisError, OSError) as exc:
                        log.info("live log for job %s: redis unavailable (%s); polling the database", self.job_id, exc)
                        await self.close()
                if need_db or final:
                    more = True
                    while more:
                        frames, more = await self.backfill(strict=not final)
                        if frames:
                            yield "".join(frames)
                            last_write = time.monotonic()
                    need_db = self.redis_id is None
                if final:
                    # The final status is written after the last lines were stored: all are sent.
                    yield f"event: end\ndata: {json.dumps({'status': status, 'last_seq': self.cursor})}\n\n"
                    return
                deadline = time.monotonic() + 1.0  # re-check the status about once a second
                while time.monotonic() < deadline:
                    if self.redis_id is None:
                        await asyncio.sleep(0.25)
                        break
                    try:
                        frames, hole = await self.live()
                    except (redis.RedisError, OSError) as exc:
                        log.info("live log for job %s: redis lost (%s)", self.job_id, exc)
                        await self.close()
                        self.redis_id = None
                        break
                    if frames:
                        yield "".join(frames)
                        last_write = time.monotonic()
                    if hole:
                        need_db = True  # fill from the database, then carry on from this stream position
                        break
                if time.monotonic() - last_write > KEEPALIVE_SECONDS:
                    yield ": keepalive\n\n"
                    last_write = time.monotonic()
        finally:
            await self.close()


def _filters(request: HttpRequest) -> tuple[int | None, str | None]:
    stream = request.GET.get("stream") or None
    return _int(request.GET.get("rank") or None), stream if stream in ("o", "e", "s") else None


async def job_log_stream(request: HttpRequest, job_id: int) -> HttpResponse:
    user = await request.auser()
    if not user.is_authenticated:
        return HttpResponse("log in to follow this log\n", status=403, content_type="text/plain")
    job = await sync_to_async(_visible_job)(user, job_id)
    cursor = _int(request.headers.get("Last-Event-ID"))
    if cursor is None:
        cursor = _int(request.GET.get("after"))
    rank, stream = _filters(request)
    follower = Follower(job.pk, -1 if cursor is None else max(cursor, -1), reverse("job_detail", args=[job.pk]),
                        rank, stream)
    response = StreamingHttpResponse(follower.events(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response
