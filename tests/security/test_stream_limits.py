"""One user cannot hold a web process's live log streams: a per-user and a global cap answer 429 with
a message, a closed stream frees its place, and a stream ends after its lifetime without an ``end``
event so the client reconnects from ``Last-Event-ID`` and misses nothing. Real uvicorn, real clients."""
from __future__ import annotations

import socket
import time

import httpx
import pytest

from tests.asgi_server import WebServer, serving, session_cookie
from tests.asgi_server import sse_events as all_sse_events
from tests.conftest import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def web(live_settings, transactional_db, tmp_path):
    with serving(live_settings, tmp_path / "uvicorn.log", TRAINHUB_SSE_MAX_PER_USER="2",
                 TRAINHUB_SSE_MAX_STREAMS="3", TRAINHUB_SSE_MAX_SECONDS="3") as server:
        yield server


def sse_events(response, deadline: float | None = None):
    """``tests.asgi_server.sse_events``, stopping at ``deadline`` (keepalives let a reader check the time)."""
    def lines():
        for raw in response.iter_lines():
            if deadline is not None and time.monotonic() > deadline:
                return
            yield raw

    class Lines:
        iter_lines = staticmethod(lines)

    return all_sse_events(Lines())


def queued_job(owner, pool):
    from trainhub.jobs.models import Job

    return Job.submit(owner=owner, name="waits", mode="centralized", spec={"name": "waits"}, pool=pool)


def open_stream(web, job_id: int, cookies: dict):
    """An open stream whose first event (``retry``) has arrived, so the server counts it."""
    client = httpx.Client(cookies=cookies, timeout=httpx.Timeout(30, connect=10))
    response = client.send(client.build_request("GET", f"{web.url}/jobs/{job_id}/logs/stream"), stream=True)
    if response.status_code == 200:
        chunks = response.iter_raw()
        next(chunks)
        response.chunks = chunks  # kept: a dropped iterator closes the response
    return client, response


def test_a_user_over_the_per_user_stream_cap_gets_429_with_a_message_and_others_are_not_affected(
        web, cpu_pool, user, user_client, django_user_model):
    from django.test import Client

    bob = django_user_model.objects.create_user("bob", password="another-secret-pw")
    alices, bobs = queued_job(user, cpu_pool), queued_job(bob, cpu_pool)
    alice_cookies = session_cookie(user_client)
    bobs_browser = Client()
    bobs_browser.force_login(bob)
    bob_cookies = session_cookie(bobs_browser)

    opened = [open_stream(web, alices.pk, alice_cookies) for _ in range(2)]
    assert [r.status_code for _, r in opened] == [200, 200]
    _, third = open_stream(web, alices.pk, alice_cookies)
    third.read()
    assert third.status_code == 429 and third.headers["Retry-After"] == "10"
    assert "the limit per user is 2 (TRAINHUB_SSE_MAX_PER_USER)" in third.text
    bob_client, bobs_stream = open_stream(web, bobs.pk, bob_cookies)
    assert bobs_stream.status_code == 200  # bob has his own allowance
    _, fourth = open_stream(web, bobs.pk, bob_cookies)  # alice 2 + bob 1 = the server's 3
    fourth.read()
    assert fourth.status_code == 429 and "TRAINHUB_SSE_MAX_STREAMS" in fourth.text

    first_client, first = opened[0]
    first.close()
    first_client.close()
    again = wait_for(lambda: (lambda r: r if r[1].status_code == 200 else r[0].close())(
        open_stream(web, alices.pk, alice_cookies)), timeout=10, message="a closed stream to free its place")
    assert again[1].status_code == 200
    for c, r in [opened[1], again, (bob_client, bobs_stream)]:
        r.close()
        c.close()


def test_streams_opened_all_at_once_are_held_to_the_limit_and_abandoned_ones_give_their_places_back(
        web, cpu_pool, user, user_client):
    """Twelve streams asked for at the same instant: two open (the per-user limit), ten get 429. Before, a
    stream counted itself only once its body started, so every view checked an empty count: all twelve
    opened. Then ten requests whose client leaves before the answer must not keep a place: the user can
    still open two streams afterwards."""
    job = queued_job(user, cpu_pool)
    (name, value), = session_cookie(user_client).items()
    request = (f"GET /jobs/{job.pk}/logs/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {name}={value}\r\n"
               f"\r\n").encode()

    def connections(n: int) -> list[socket.socket]:
        return [socket.create_connection(("127.0.0.1", web.port), timeout=30) for _ in range(n)]

    at_once = connections(12)
    for sock in at_once:  # all twelve requests are sent before any answer is read
        sock.sendall(request)
    statuses = [sock.makefile("rb").readline().split()[1].decode() for sock in at_once]
    assert sorted(statuses) == ["200"] * 2 + ["429"] * 10, statuses
    for sock in at_once:
        sock.close()

    for sock in connections(10):  # clients that leave at once, before reading their answer
        sock.sendall(request)
        sock.close()

    def two_open():
        opened = [open_stream(web, job.pk, session_cookie(user_client)) for _ in range(3)]
        statuses = [r.status_code for _, r in opened]
        for client, response in opened:
            response.close()
            client.close()
        return statuses == [200, 200, 429] or None

    wait_for(two_open, timeout=15, message="the places of closed and abandoned streams to be given back")


def test_a_stream_ends_after_its_lifetime_and_the_reconnect_resumes_from_the_last_event_id(
        web, cpu_pool, user, user_client):
    from trainhub.jobs import logs

    job = queued_job(user, cpu_pool)
    logs.append_lines(job.pk, [(seq, 0, "o", f"line {seq}") for seq in range(5)])
    cookies = session_cookie(user_client)
    started = time.monotonic()
    seen, events = [], []
    with httpx.stream("GET", f"{web.url}/jobs/{job.pk}/logs/stream", cookies=cookies,
                      timeout=httpx.Timeout(30, connect=10)) as response:
        for event, ident, data in sse_events(response, deadline=started + 40):
            events.append(event)
            seen.append(int(ident))
    lasted = time.monotonic() - started
    assert 3 <= lasted < 20, lasted  # closed by the server at its lifetime, not by the job's end
    assert seen == [0, 1, 2, 3, 4] and "end" not in events

    logs.append_lines(job.pk, [(seq, 0, "o", f"line {seq}") for seq in range(5, 8)])
    got = []
    with httpx.stream("GET", f"{web.url}/jobs/{job.pk}/logs/stream", cookies=cookies,
                      headers={"Last-Event-ID": str(seen[-1])}, timeout=httpx.Timeout(30, connect=10)) as resumed:
        for event, ident, data in sse_events(resumed):
            got.append(data["text"])
            if len(got) == 3:
                break
    assert got == ["line 5", "line 6", "line 7"]


def test_a_finished_100k_line_log_is_sent_from_its_newest_lines_not_replayed_per_connection(
        web, cpu_pool, user, user_client):
    """Each connection to a finished log costs at most ``TRAINHUB_SSE_FINISHED_LINES`` (5,000) lines,
    not the whole log (before: all 100,000 lines, 31.6 MB, read and rendered per connection; now 1.6 MB)."""
    from trainhub.jobs import logs
    from trainhub.jobs.models import Job

    job = Job.objects.create(owner=user, name="chatty", mode="centralized", spec={}, pool=cpu_pool, status="running")
    for start in range(0, 100_000, 20_000):
        logs.append_lines(job.pk, [(s, 0, "o", f"step {s} loss 0.{s:06d}") for s in range(start, start + 20_000)])
    job.transition("succeeded", reason="test")
    cookies = session_cookie(user_client)

    def connect(**headers) -> tuple[int, list]:
        response = httpx.get(f"{web.url}/jobs/{job.pk}/logs/stream", cookies=cookies, headers=headers,
                             timeout=httpx.Timeout(60, connect=10))
        assert response.status_code == 200
        return len(response.content), list(all_sse_events(response))

    size, events = connect()
    lines = [int(ident) for event, ident, _ in events if event == "line"]
    skipped = [data for event, _, data in events if event == "skipped"]
    assert lines == list(range(95_000, 100_000))
    assert size < 5_000 * 400, size  # 1.59 MB measured; the whole log was 31.6 MB
    assert skipped == [{"first": 0, "last": 94_999, "older_url": f"/jobs/{job.pk}/logs/page?before=95000"}]
    assert events[-1][0] == "end" and events[-1][2]["last_seq"] == 99_999

    size, events = connect(**{"Last-Event-ID": "99990"})  # a client that has nearly everything
    assert [e for e, _, _ in events] == ["line"] * 9 + ["end"] and size < 10_000

    older = user_client.get(skipped[0]["older_url"], HTTP_HX_REQUEST="true").content.decode()
    assert 'id="L94999"' in older and 'id="L94500"' in older and 'id="L94499"' not in older
    assert "Load older lines" in older
    page = user_client.get(f"/jobs/{job.pk}").content.decode()  # the page itself: the tail, no stream
    assert 'id="L99999"' in page and 'id="L99499"' not in page and 'data-live="0"' in page


def _memory_kb(pid: int, field: str) -> int:
    for row in open(f"/proc/{pid}/status"):
        if row.startswith(field + ":"):
            return int(row.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_a_job_of_the_longest_lines_cannot_make_a_web_process_hold_its_log_in_memory(
        live_settings, transactional_db, tmp_path, cpu_pool, user, user_client):
    """6,000 lines of 16,000 characters (96 MB) followed live: a viewer still gets every line once, and
    the web process's peak memory grows by what its caps allow, not by the log (before: the job's hub
    kept every line and the frame cache every rendered frame, ~300 MB)."""
    import threading

    import redis

    from trainhub.jobs import logs
    from trainhub.jobs.models import Job

    server = WebServer(live_settings, tmp_path / "uvicorn.log", TRAINHUB_SSE_JOB_BUFFER_BYTES=str(1 << 20),
                       TRAINHUB_SSE_FRAME_CACHE_BYTES=str(2 << 20)).start()
    job = Job.objects.create(owner=user, name="wide", mode="centralized", spec={}, pool=cpu_pool, status="running")
    try:
        cookies = session_cookie(user_client)
        logs.append_lines(job.pk, [(0, 0, "o", "warming up")])
        got, ready = [], threading.Event()

        def follow():
            with httpx.stream("GET", f"{server.url}/jobs/{job.pk}/logs/stream", cookies=cookies,
                              timeout=httpx.Timeout(120, connect=10)) as response:
                for event, ident, data in all_sse_events(response):
                    if event == "end":
                        return
                    got.append((data["seq"], len(data["text"])))
                    ready.set()

        viewer = threading.Thread(target=follow)
        viewer.start()
        assert ready.wait(30), server.output()[-2000:]
        before = _memory_kb(server.proc.pid, "VmRSS")
        for start in range(1, 6001, 200):
            logs.append_lines(job.pk, [(s, 0, "o", f"{s:05d}" + "x" * 15_995) for s in range(start, start + 200)])
        job.transition("succeeded", reason="test")
        viewer.join(120)
        peak = _memory_kb(server.proc.pid, "VmHWM")
    finally:
        server.stop()
        redis.Redis.from_url(live_settings.REDIS_URL).delete(logs.stream_key(job.pk))
    assert [seq for seq, _ in got] == list(range(6001))
    assert all(size == 16_000 for seq, size in got if seq)
    grew = (peak - before) // 1024
    assert grew < 150, f"the web process grew by {grew} MB following a 96 MB log"  # 56-62 MB here; 393 before


def test_a_stream_whose_body_is_never_sent_gives_its_place_back_when_closed_or_dropped(
        transactional_db, settings, cpu_pool, user):
    """The view takes the stream's place before the body runs; a client that leaves between the two (Django
    then closes the response in a thread of its own without iterating it) or a response lost on the way must
    not keep it, else the user is locked out of live logs on that process until it restarts. In-process: the
    real view and responses, with the request built here (this moment cannot be hit reliably from a socket)."""
    import asyncio
    import gc

    from django.test import AsyncRequestFactory

    from trainhub.jobs.views import stream

    settings.TRAINHUB_SSE_MAX_PER_USER = 2
    job = queued_job(user, cpu_pool)

    async def main() -> list:
        async def open_one():
            request = AsyncRequestFactory().get(f"/jobs/{job.pk}/logs/stream")
            request.user = user
            return await stream.job_log_stream(request, job.pk)

        async def settle():  # a close from another thread hands the count back through the loop
            for _ in range(3):
                await asyncio.sleep(0)

        first, second = await open_one(), await open_one()
        seen = [first.status_code, second.status_code, (await open_one()).status_code]
        await asyncio.to_thread(first.close)  # as Django closes a response its client left
        await settle()
        third = await open_one()
        seen += [third.status_code, (await open_one()).status_code]
        del second  # never sent, never closed
        gc.collect()
        await settle()
        seen.append((await open_one()).status_code)
        seen.append(dict(stream._OPEN))
        return seen, third

    seen, third = asyncio.run(main())
    assert seen == [200, 200, 429, 200, 429, 200, {user.pk: 1}]  # the third still open
    third.close()  # its loop has ended (as a view run by WSGI's async_to_sync): given back at once
    assert dict(stream._OPEN) == {}
