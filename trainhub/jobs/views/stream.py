"""``GET /jobs/{id}/logs/stream``: a job's log as Server-Sent Events.

Lines travel as ``lines`` events of consecutive lines (up to 200): ``id:`` is the last seq it covers,
``data:`` a JSON array of ``[seq, rank, stream, text]``, with a fifth element, the escaped,
colour-rendered text as HTML, only for a line with ANSI codes or other control characters (a browser
shows any other line's ``text`` as it is; ``static/js/logview.js`` builds the row ``ansi.row`` would).
A live event is the Redis Stream entry the worker wrote (``logs.entry_json``), passed on as it is to
each viewer that wants all its lines. The client resumes from ``Last-Event-ID`` or ``?after=SEQ``.
Lines come live from the Redis Stream; anything the stream does not hold (older than its window, or
lost with a Redis restart) comes from the database.
The sequence sent is gap-free and duplicate-free: a line is sent only when it is exactly
the next seq, and a jump forward is filled from the database first. When the job is
final and every stored line has been sent, an ``end`` event closes the stream.

A stored log is not replayed in full per connection: a client that (re)connects
more than ``TRAINHUB_SSE_FINISHED_LINES`` lines or ``TRAINHUB_SSE_CATCHUP_BYTES`` behind the
newest line — of a finished job, or of a running one — gets a ``skipped`` event (``{first, last,
older_url}``) and then only the newest lines, then live ones (``catchup.py``). So a connection to a
100,000-line log reads and sends at most that much backlog, however often it is opened.

``?channel=page`` is the job page's one live channel: the same stream also carries named
events ``status``, ``progress``, ``history``, ``metrics`` and ``files`` (see ``live.py``),
a snapshot of each on every (re)connect and then each change; ``?lines=0`` leaves the
lines out (a paused log). Other clients (the CLI, the API's followers) get lines only.

Memory per job in a server process is bounded in bytes, not only in lines (a line may hold
16,384 characters): a job's hub keeps at most ``TRAINHUB_SSE_JOB_BUFFER_BYTES`` of recent lines (as their events' bytes)
(older lines come from the database), the rendered frames shared by viewers at most
``TRAINHUB_SSE_FRAME_CACHE_BYTES`` in all, and one Redis read takes at most ``XREAD_ENTRIES``
entries (each up to ``logs.ENTRY_LINES`` lines).

Bounded per server process: ``TRAINHUB_SSE_MAX_PER_USER`` open streams per user and
``TRAINHUB_SSE_MAX_STREAMS`` in all, beyond which a new one gets 429 and a message saying so
(a stream is counted from the view that allows it, ``_Place``, so streams asked for at once cannot all pass);
a stream closes after ``TRAINHUB_SSE_MAX_SECONDS`` without an ``end`` event, and the browser's
EventSource reconnects by itself from ``Last-Event-ID`` (the page's sections re-sent).
"""
from __future__ import annotations

import asyncio
import bisect
import collections
import json
import logging
import operator
import time

import redis
import redis.asyncio as aioredis
from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from trainhub.jobs import logs, retention
from trainhub.jobs.models import FINAL, Job
from trainhub.jobs.views import aiodb, catchup, int_param, job_for_user, live

log = logging.getLogger(__name__)
BLOCK_MS = 1000
KEEPALIVE_SECONDS = 15
DB_BATCH = 200  # rows per database read of one viewer: at most ~3 MB of text with the longest lines
FRAME_CACHE = 20_000
HUB_LINES = 20_000  # recent lines a job's hub keeps for viewers that are a little behind
XREAD_ENTRIES = 2  # stream entries per Redis read: at most 400 lines, ~6.5 MB of the longest lines
#: recent lines as the JSON array elements of a ``lines`` event, oldest first (one event loop: no lock needed)
_FRAMES: dict[tuple[int, int], str] = {}
_FRAME_BYTES = [0]  # characters held in ``_FRAMES``
#: open streams of this server process per user id, each a ``_Place`` (changed on the event loop only)
_OPEN: collections.Counter = collections.Counter()
RETRY_AFTER_SECONDS = 10


def _status(job_id: int) -> str:
    return Job.objects.filter(pk=job_id).values_list("status", flat=True).first() or "cancelled"


class Hub:
    """One Redis reader and one status check per job per server process, for all its viewers.

    A hot job's viewers are woken at most once per ``TRAINHUB_SSE_COALESCE_MS`` once it has
    ``TRAINHUB_SSE_COALESCE_VIEWERS`` or more: each wake-up costs one write per viewer, so a
    thousand viewers woken per Redis read would spend the process on writes of a line or two
    (bench/log_fanout.py); fewer viewers are woken per read, as soon as lines arrive.

    Keeps the most recent contiguous lines read from the job's Redis Stream, as its entries (``entries``);
    ``epoch`` changes whenever that run of lines restarts (first attach, Redis lost and
    back, a hole in the stream), which tells viewers to look in the database first.
    """

    def __init__(self, job_id: int):
        self.job_id = job_id
        self.key = logs.stream_key(job_id)
        self.entries: list[logs.Entry] = []  # contiguous by seq; trimmed from the front now and then
        self.held_bytes = 0  # bytes of the entries' frames (all a hub holds of them)
        self.status: str | None = None
        self.live = False  # the Redis Stream is being read
        self.epoch = 0
        self.viewers = 0
        self.page_viewers = 0  # viewers of the job page's sections: only then is ``page`` read
        self.page = live.PageWatch(job_id)
        self.db_lost = False  # the last status read failed with a database error
        self.changed = asyncio.Event()
        self.task: asyncio.Task | None = None

    def notify(self) -> None:
        event, self.changed = self.changed, asyncio.Event()
        event.set()

    def restart(self, live: bool) -> None:
        self.entries.clear()
        self.held_bytes = 0
        self.live = live
        self.epoch += 1

    async def run(self) -> None:
        client, redis_id = None, None
        try:
            while self.viewers > 0:
                try:
                    if self.page_viewers > 0:
                        await aiodb.call(self.page.refresh)
                        self.status = self.page.status
                    else:
                        self.page.read = False  # nobody watches the sections: what it holds goes stale
                        self.status = await aiodb.call(_status, self.job_id)
                    if self.db_lost:
                        log.warning("live log for job %s: the database is back", self.job_id)
                        self.db_lost = False
                except DatabaseError as exc:
                    # Lines still come from Redis; the status is checked again in a second.
                    if not self.db_lost:
                        log.warning("live log for job %s: the database is unreachable (%s); live lines go "
                                    "on from Redis", self.job_id, exc)
                    self.db_lost = True
                if self.status in FINAL:
                    self.notify()
                    return
                if redis_id is None:
                    try:
                        client = client or aioredis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2,
                                                                   socket_timeout=BLOCK_MS / 1000 + 5)
                        last = await client.xrevrange(self.key, count=1)
                        redis_id = last[0][0].decode() if last else "0-0"
                        self.restart(live=True)
                    except (redis.RedisError, OSError) as exc:
                        log.info("live log for job %s: redis unavailable (%s); viewers poll the database",
                                 self.job_id, exc)
                        client = await _close(client)
                        self.restart(live=False)
                        self.notify()
                        await asyncio.sleep(0.25)
                        continue
                try:  # the worker publishes the job's lines, and stores them every 50 ms, while this is set
                    await client.set(logs.watch_key(self.job_id), 1, ex=logs.WATCH_SECONDS)
                except (redis.RedisError, OSError) as exc:  # the read below finds out whether Redis is gone
                    log.info("live log for job %s: could not mark it followed (%s)", self.job_id, exc)
                self.notify()  # the status and the page's sections, and lines held back (below)
                window = settings.TRAINHUB_SSE_COALESCE_MS / 1000
                held, woke = False, time.monotonic()  # lines read but not yet announced; last wake-up
                deadline = woke + 1.0  # re-check the status about once a second
                while redis_id is not None and time.monotonic() < deadline and self.viewers > 0:
                    block = BLOCK_MS
                    if held:  # read on until the coalescing window ends (block=0 would be "forever")
                        block = max(1, int((woke + window - time.monotonic()) * 1000))
                    try:
                        reply = await client.xread({self.key: redis_id}, count=XREAD_ENTRIES, block=block)
                    except (redis.RedisError, OSError) as exc:
                        log.info("live log for job %s: redis lost (%s)", self.job_id, exc)
                        client, redis_id = await _close(client), None
                        self.restart(live=False)
                        break
                    for _key, entries in reply or ():
                        for entry_id, fields in entries:
                            redis_id = entry_id.decode()
                            self.add(logs.decode_entry(fields))
                    self.trim()
                    held = held or bool(reply)
                    if held and (self.viewers < settings.TRAINHUB_SSE_COALESCE_VIEWERS or
                                 time.monotonic() - woke >= window):
                        self.notify()
                        held, woke = False, time.monotonic()
        finally:
            await _close(client)
            self.notify()
            if _HUBS.get(self.job_id) is self:
                del _HUBS[self.job_id]

    def add(self, entry: logs.Entry) -> None:
        if self.entries:
            held = self.entries[-1].last
            if entry.last <= held:
                return
            if entry.first <= held:  # lines already held (never seen from one writer; kept safe anyway)
                entry = logs.Entry.of([line for line in entry.lines() if line.seq > held])
            if entry.first != held + 1:
                self.restart(live=True)  # a hole: viewers fill it from the database
        self.entries.append(entry)
        self.held_bytes += len(entry.frame)

    def trim(self) -> None:
        """Drop the oldest entries once the hub holds more than ``2 * HUB_LINES`` lines or
        ``TRAINHUB_SSE_JOB_BUFFER_BYTES`` of them, down to half of either (viewers behind that read the
        database)."""
        if not self.entries:
            return
        cap = settings.TRAINHUB_SSE_JOB_BUFFER_BYTES
        held = self.entries[-1].last - self.entries[0].first + 1
        if held <= 2 * HUB_LINES and self.held_bytes <= cap:
            return
        cut, kept = 0, self.held_bytes
        while cut < len(self.entries) - 1 and (self.entries[-1].last - self.entries[cut].first >= HUB_LINES or
                                                kept > cap // 2):
            kept -= len(self.entries[cut].frame)
            cut += 1
        del self.entries[:cut]
        self.held_bytes = kept

    def after(self, cursor: int) -> list[logs.Entry] | None:
        """The entries holding the lines after ``cursor`` if this hub holds all of them from cursor + 1 on,
        else None."""
        if not self.entries:
            return []
        if self.entries[0].first > cursor + 1:
            return None
        return self.entries[bisect.bisect_right(self.entries, cursor, key=operator.attrgetter("last")):]


_HUBS: dict[int, Hub] = {}


def _acquire(job_id: int, page: bool) -> Hub:
    hub = _HUBS.get(job_id)
    if hub is None or hub.task is None or hub.task.done():
        hub = _HUBS[job_id] = Hub(job_id)
    hub.viewers += 1
    hub.page_viewers += page
    if hub.task is None:
        hub.task = asyncio.get_running_loop().create_task(hub.run())
    return hub


def _release(hub: Hub, page: bool) -> None:
    hub.viewers -= 1
    hub.page_viewers -= page


async def _close(client):
    if client is not None:
        try:
            await client.aclose()
        except Exception:  # the connection may already be gone
            pass
    return None


class Follower:
    """Produces SSE frames for one client, starting after ``cursor``.

    ``lines=False`` sends no log lines (a paused log, or a window of old lines on screen);
    ``page`` (a ``live.PageViewer``) adds the job page's sections to the stream.
    """

    def __init__(self, job_id: int, cursor: int, rank: int | None = None, stream: str | None = None,
                 *, lines: bool = True, page: live.PageViewer | None = None, place: _Place | None = None):
        self.job_id = job_id
        self.place = place  # this stream's place among the open ones, given back when it ends
        self.cursor = cursor  # last seq sent (or skipped by a filter)
        self.rank = rank
        self.stream = stream
        self.lines = lines
        self.page = page
        self.seen_epoch = None  # the hub's epoch this client last filled from the database for
        self.opening = True  # no line read yet on this connection: the catch-up bound applies

    def item(self, line: logs.Line) -> str:
        """The line as an element of a ``lines`` event's array ("" when a filter passes over it)."""
        self.cursor = line.seq
        if (self.rank is not None and line.rank != self.rank) or (self.stream and line.stream != self.stream):
            return ""
        key = (self.job_id, line.seq)
        cached = _FRAMES.get(key)
        if cached is None:  # many viewers of one job: each line is rendered once, not once per viewer
            cached = _FRAMES[key] = logs.line_json(line)
            _FRAME_BYTES[0] += len(cached)
        return cached

    def event(self, items: list[str]) -> str:
        """One ``lines`` event of these items; its id is the cursor (the last line read, sent or filtered)."""
        return f"event: lines\nid: {self.cursor}\ndata: [{','.join(items)}]\n\n"

    async def backfill(self, strict: bool = True) -> tuple[str, bool]:
        """A ``lines`` event of stored lines after the cursor, from the database ("" if none to send); the
        flag says whether more wait.

        ``strict`` stops at a hole in the stored sequence instead of skipping it (a hole can
        only be a write still in flight); once the job is final nothing more can arrive.
        """
        lines = await aiodb.call(logs.read_lines, self.job_id, self.cursor, DB_BATCH)
        items, more = [], len(lines) == DB_BATCH
        for line in lines:
            if strict and line.seq != self.cursor + 1:
                cut = await aiodb.call(retention.cut_range, self.job_id)
                if not (cut and cut[0] <= self.cursor + 1 and line.seq - 1 <= cut[1]):
                    more = False  # not a retention cut: wait for the write
                    break
            item = self.item(line)
            if item:
                items.append(item)
        _bound_frames()
        return (self.event(items) if items else ""), more

    async def line_frames(self, hub: Hub, final: bool):
        """The lines after the cursor as ``lines`` events: from the hub when it holds them, else the
        database first, from where ``catchup`` says (a far-behind client skips to the newest lines)."""
        recent = None if final or not hub.live or hub.epoch != self.seen_epoch else hub.after(self.cursor)
        if recent is None:
            epoch = hub.epoch
            if self.opening:  # (re)connecting: a far-behind client starts from the newest lines
                start = await aiodb.call(catchup.catch_up_from, self.job_id, self.cursor)
                self.opening = False
                if start > self.cursor:
                    skipped = catchup.skipped_frame(self.job_id, self.cursor + 1, start, self.rank, self.stream)
                    self.cursor = start  # before the yield: the cursor is what the client has been told
                    yield skipped
            more = True
            while more:
                batch, more = await self.backfill(strict=not final)
                if batch:
                    yield batch
            self.seen_epoch = epoch if hub.live else None
            recent = [] if final or not hub.live else (hub.after(self.cursor) or [])
        events = []
        whole = self.rank is None and not self.stream  # a viewer of every line is sent the entries as they are
        for entry in recent:
            if whole and entry.first == self.cursor + 1:
                self.cursor = entry.last
                events.append(entry.frame)
                continue
            items = [i for i in (self.item(l) for l in entry.lines() if l.seq == self.cursor + 1) if i]
            if items:
                events.append(self.event(items).encode())
        _bound_frames()
        if events:
            yield b"".join(events)

    async def events(self):
        try:
            async for chunk in self._events():
                yield chunk
        finally:
            if self.place is not None:
                self.place.close()

    async def _events(self):
        yield "retry: 1000\n\n"
        page = self.page is not None
        hub = _acquire(self.job_id, page)
        last_write = started = time.monotonic()
        try:
            while True:
                changed = hub.changed
                if hub.task.done() and hub.status not in FINAL:  # the hub stopped (last viewer left, error)
                    _release(hub, page)
                    await asyncio.sleep(0.05)
                    hub = _acquire(self.job_id, page)
                    continue
                if hub.status is None or (page and not hub.page.read):
                    await _wait(changed, 2)
                    continue
                final = hub.status in FINAL
                sent = self.cursor
                try:
                    if self.lines:
                        async for chunk in self.line_frames(hub, final):
                            yield chunk
                            last_write, sent = time.monotonic(), self.cursor
                    if page:
                        sections = await self.page.events(hub.page)
                        if sections:
                            yield sections
                            last_write = time.monotonic()
                except DatabaseError as exc:
                    # The stream stays open (live lines keep coming from the hub); what was read but
                    # not sent is read again once the database answers.
                    log.info("live log for job %s: a database read failed (%s); trying again", self.job_id, exc)
                    self.cursor = sent
                    await asyncio.sleep(1)
                    if time.monotonic() - last_write > KEEPALIVE_SECONDS:
                        yield ": keepalive\n\n"
                        last_write = time.monotonic()
                    continue
                if final:
                    # The final status is written after the last lines were stored: all are sent.
                    yield f"event: end\ndata: {json.dumps({'status': hub.status, 'last_seq': self.cursor})}\n\n"
                    return
                if hub.changed is changed:
                    await _wait(changed, KEEPALIVE_SECONDS if hub.live else 0.25)
                if time.monotonic() - started > settings.TRAINHUB_SSE_MAX_SECONDS:
                    return  # no end event: the client reconnects from the last id it got
                if time.monotonic() - last_write > KEEPALIVE_SECONDS:
                    yield ": keepalive\n\n"
                    last_write = time.monotonic()
        finally:
            _release(hub, page)


def _bound_frames() -> None:
    """Keep the frame cache within its count and byte caps (checked once per batch of frames, not per
    line: a setting's lookup per line was 7 % of the server's CPU in a flood)."""
    if len(_FRAMES) > FRAME_CACHE or _FRAME_BYTES[0] > settings.TRAINHUB_SSE_FRAME_CACHE_BYTES:
        _forget_frames()


def _forget_frames() -> None:
    """Drop the oldest cached frames until they are at most 3/4 of the count and of the byte cap."""
    most, cap = FRAME_CACHE * 3 // 4, settings.TRAINHUB_SSE_FRAME_CACHE_BYTES * 3 // 4
    for old in list(_FRAMES):
        if len(_FRAMES) <= most and _FRAME_BYTES[0] <= cap:
            break
        _FRAME_BYTES[0] -= len(_FRAMES.pop(old))


async def _wait(event: asyncio.Event, timeout: float) -> None:
    try:
        async with asyncio.timeout(timeout):  # no extra task per wait, unlike wait_for
            await event.wait()
    except TimeoutError:
        pass


def _filters(request: HttpRequest) -> tuple[int | None, str | None]:
    stream = request.GET.get("stream") or None
    return int_param(request.GET.get("rank") or None), stream if stream in ("o", "e", "s") else None


def _viewer(request: HttpRequest, job_id: int):
    """(user, job) for a logged-in user who may see the job (else Http404), or (None, None)."""
    user = request.user  # the session and the user are read here, in the same thread as the job
    if not user.is_authenticated:
        return None, None
    return user, job_for_user(user, job_id)


async def job_log_stream(request: HttpRequest, job_id: int) -> HttpResponse:
    try:
        user, job = await aiodb.call(_viewer, request, job_id)
    except DatabaseError as exc:
        log.warning("live log for job %s: the database is unreachable (%s)", job_id, exc)
        response = HttpResponse("the database is unreachable; try again in a few seconds\n", status=503,
                                content_type="text/plain")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
    if user is None:
        return HttpResponse("log in to follow this log\n", status=403, content_type="text/plain")
    refused = _over_limit(user.pk)
    if refused:
        response = HttpResponse(refused + "\n", status=429, content_type="text/plain")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
    # From the check to the place taken nothing awaits, so streams opened at once are counted one by one.
    cursor = int_param(request.headers.get("Last-Event-ID"))
    if cursor is None:
        cursor = int_param(request.GET.get("after"))
    rank, stream = _filters(request)
    page = live.PageViewer(request, job.pk) if request.GET.get("channel") == "page" else None
    follower = Follower(job.pk, -1 if cursor is None else max(cursor, -1), rank, stream,
                        lines=request.GET.get("lines") != "0", page=page, place=_Place(user.pk))
    response = StreamingHttpResponse(_Body(follower), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
    return response


class _Place:
    """One open stream counted in ``_OPEN``, from the view that allowed it until it is given back once:
    when the stream ends, when Django closes the response (also one whose body was never sent: the client
    left first), or, failing both, when it is dropped. The count changes on the event loop only; a close
    from Django's thread (it closes responses in one) is handed to the loop."""

    __slots__ = ("user_id", "loop")

    def __init__(self, user_id: int):
        self.user_id: int | None = user_id
        self.loop = asyncio.get_running_loop()
        _OPEN[user_id] += 1

    def close(self) -> None:
        if self.user_id is None:
            return
        try:
            here = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            here = False
        if here or not self.loop.is_running():  # not running: the view ran in a loop of its own (WSGI's
            self._give_back()                   # async_to_sync), which no longer counts anything
            return
        try:
            self.loop.call_soon_threadsafe(self._give_back)
        except RuntimeError:  # closed since the look above
            self._give_back()

    def __del__(self):
        self.close()

    def _give_back(self) -> None:
        if self.user_id is None:
            return
        user_id, self.user_id = self.user_id, None
        _OPEN[user_id] -= 1
        if _OPEN[user_id] <= 0:
            del _OPEN[user_id]


class _Body:
    """The stream's body for ``StreamingHttpResponse``: its events, and a ``close`` Django calls when it
    closes the response, which gives the stream's place back even if the body was never iterated."""

    def __init__(self, follower: Follower):
        self._events = follower.events()
        self.close = follower.place.close

    def __aiter__(self):
        return self._events


def _over_limit(user_id: int) -> str | None:
    """Why this user may not open another live stream on this server process now, or None."""
    mine, every = _OPEN[user_id], sum(_OPEN.values())
    if mine >= settings.TRAINHUB_SSE_MAX_PER_USER:
        return (f"too many live logs open: you follow {mine} here, the limit per user is "
                f"{settings.TRAINHUB_SSE_MAX_PER_USER} (TRAINHUB_SSE_MAX_PER_USER); close some job pages or "
                f"followers and reload, or read the log with GET /api/jobs/ID/logs")
    if every >= settings.TRAINHUB_SSE_MAX_STREAMS:
        return (f"this server follows {every} live logs, its limit (TRAINHUB_SSE_MAX_STREAMS); "
                f"try again in {RETRY_AFTER_SECONDS} seconds, or read the log with GET /api/jobs/ID/logs")
    return None
