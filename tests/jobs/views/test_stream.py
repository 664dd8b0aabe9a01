"""The live log over Server-Sent Events, through uvicorn, with a real Redis."""
from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from django.db import connection

from tests.asgi_server import AsgiServer, server_env, session_cookie, sse_events
from tests.conftest import RedisServer, database_url, free_port
from trainhub.jobs import logs
from trainhub.jobs.models import Job

pytestmark = pytest.mark.slow


@pytest.fixture
def own_redis(tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def start_web(live_settings, own_redis, transactional_db, tmp_path):
    """Start uvicorn on this test's Redis with ``TRAINHUB_*`` settings of the test's own; stopped after it."""
    live_settings.REDIS_URL = own_redis.url
    logs.redis_client.cache_clear()
    servers = []

    def start(**extra_env: str) -> AsgiServer:
        env = {**server_env(database_url(), own_redis.url), **extra_env}
        servers.append(AsgiServer(free_port(), env, tmp_path / "uvicorn.log").start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
    logs.redis_client.cache_clear()


@pytest.fixture
def web(start_web):
    # These tests check that every line arrives once, in order; a finished log's bound (only its newest
    # 5,000 lines per connection) is tested in tests/security/test_stream_limits.py, so lift it here.
    return start_web(TRAINHUB_SSE_FINISHED_LINES="50000")


@pytest.fixture
def cookies(user_client):
    return session_cookie(user_client)


@pytest.fixture
def job(user, cpu_pool):
    return Job.objects.create(owner=user, name="stream", mode="centralized", spec={}, pool=cpu_pool, status="running")


def emit(job, start: int, count: int, text: str = "line {}") -> None:
    logs.append_lines(job.pk, [logs.Line(seq, 0, "o", text.format(seq)) for seq in range(start, start + count)])


def finish(job) -> None:
    job.transition("succeeded", reason="test")


def closing(fn, *args) -> None:
    """``fn(*args)`` in a thread that then ends: its database connection is closed here, not left open until the
    garbage collector finds it (on PostgreSQL it kept the test database from being dropped at the end)."""
    try:
        fn(*args)
    finally:
        connection.close()


def line_seqs(events: list[bytes]) -> list[int]:
    """The seqs of the lines in these raw events (split at blank lines) of the stream."""
    return [line[0] for e in events if e.startswith(b"event: lines\n") for line in json.loads(e.split(b"\ndata: ", 1)[1])]


def read(web, job, cookies, *, stop_after: int | None = None, headers=None, params=None):
    """Read events until ``stop_after`` lines arrived or the ``end`` event; returns (seqs, end)."""
    seqs, end = [], None
    with httpx.stream("GET", f"{web.url}/jobs/{job.pk}/logs/stream", cookies=cookies, headers=headers or {},
                      params=params or {}, timeout=20) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert "default-src 'self'" in response.headers["content-security-policy"]  # csp.py's async path
        for event, ident, data in sse_events(response):
            if event == "end":
                end = data
                break
            assert int(ident) == data["seq"]
            seqs.append(data["seq"])
            if stop_after is not None and len(seqs) >= stop_after:
                break
    return seqs, end


def test_a_client_reconnecting_with_last_event_id_gets_every_line_once(web, job, cookies):
    emit(job, 0, 300)
    first, _ = read(web, job, cookies, stop_after=120)
    emit(job, 300, 200)  # printed while the client was away
    second, _ = read(web, job, cookies, stop_after=380, headers={"Last-Event-ID": str(first[-1])})
    finisher = threading.Timer(0.5, closing, (lambda: (emit(job, 500, 50), finish(job)),))
    finisher.start()
    third, end = read(web, job, cookies, headers={"Last-Event-ID": str(second[-1])})
    finisher.join()
    assert first + second + third == list(range(550))
    assert end == {"status": "succeeded", "last_seq": 549}


def test_a_client_resuming_with_the_after_parameter_gets_every_line_once(web, job, cookies):
    emit(job, 0, 100)
    first, _ = read(web, job, cookies, stop_after=40)
    emit(job, 100, 10)
    finish(job)
    rest, end = read(web, job, cookies, params={"after": first[-1]})
    assert first + rest == list(range(110))
    assert end["status"] == "succeeded"


def test_lines_printed_while_following_arrive_live_and_the_stream_ends_when_the_job_does(web, job, cookies):
    def produce():
        for batch in range(10):
            emit(job, batch * 20, 20)
        finish(job)

    producer = threading.Timer(1.0, closing, (produce,))
    producer.start()
    seqs, end = read(web, job, cookies)
    producer.join()
    assert seqs == list(range(200))
    assert end["status"] == "succeeded"


def test_live_lines_reach_a_viewer_of_all_a_filtered_one_and_one_resuming_mid_entry_as_stored(web, job, cookies):
    """A live event is the worker's Redis entry passed on whole to a viewer of every line; a filtered viewer
    and one that resumes inside an entry get their lines cut from the same entries, each with its HTML
    where the text has colour codes."""
    from trainhub.jobs import ansi

    def text(seq: int) -> str:
        return f"\x1b[3{seq % 8}mstep {seq}\x1b[0m <done>" if seq % 7 == 0 else f"<step> {seq} & more"

    got: dict[str, list[dict]] = {}

    def follow(name: str, params: dict) -> None:
        with httpx.stream("GET", f"{web.url}/jobs/{job.pk}/logs/stream", params=params, cookies=cookies,
                          timeout=20) as response:
            got[name] = []
            for event, _, data in sse_events(response):
                if event == "end":
                    return
                if event == "line":
                    got[name].append(data)

    readers = [threading.Thread(target=closing, args=(follow, name, params))
               for name, params in [("all", {}), ("rank 1", {"rank": 1}), ("after 25", {"after": 25})]]
    for reader in readers:
        reader.start()
    time.sleep(1)  # every viewer attached: the lines below come live, from Redis
    for start in range(0, 100, 20):  # one entry per 20 lines
        logs.append_lines(job.pk, [logs.Line(s, s % 2, "o", text(s)) for s in range(start, start + 20)])
    finish(job)
    for reader in readers:
        reader.join(30)
    expected = [{"seq": s, "rank": s % 2, "stream": "o", "text": text(s),
                 **({"html": ansi.to_html(text(s))} if s % 7 == 0 else {})} for s in range(100)]
    assert got["all"] == expected
    assert got["rank 1"] == [line for line in expected if line["rank"] == 1]
    assert got["after 25"] == expected[26:]
    assert expected[7]["html"] == '<span class="ansi-white">step 7</span> &lt;done&gt;'


def test_a_redis_restart_mid_job_loses_and_duplicates_nothing(web, job, cookies, own_redis):
    got: list[int] = []
    result = {}

    def follow():
        seqs, result["end"] = read(web, job, cookies)
        got.extend(seqs)

    emit(job, 0, 100)
    reader = threading.Thread(target=follow)
    reader.start()
    emit(job, 100, 100)
    own_redis.stop()
    emit(job, 200, 100)  # Redis is down: only the database has these
    own_redis.start()
    emit(job, 300, 100)
    finish(job)
    reader.join(30)
    assert got == list(range(400))
    assert result["end"]["status"] == "succeeded"


def test_lines_older_than_the_redis_window_come_from_the_database(web, job, cookies, own_redis):
    emit(job, 0, 50)
    import redis

    redis.Redis.from_url(own_redis.url).delete(logs.stream_key(job.pk))  # as if trimmed or lost
    emit(job, 50, 50)
    finish(job)
    seqs, end = read(web, job, cookies)
    assert seqs == list(range(100)) and end["last_seq"] == 99


def test_hostile_lines_arrive_as_text_and_coloured_ones_as_escaped_html(web, job, cookies):
    emit(job, 0, 1, "<script>alert(1)</script>")
    emit(job, 1, 1, '<div hx-get="/jobs/new" hx-trigger="load">x</div>')
    emit(job, 2, 1, "\x1b[31m<b>red</b>\x1b[0m & done")
    finish(job)
    with httpx.stream("GET", f"{web.url}/jobs/{job.pk}/logs/stream", cookies=cookies, timeout=20) as response:
        events = [data for event, _, data in sse_events(response) if event == "line"]
    # plain text is text: the page builds the row with it escaped (tests/e2e/test_job_page_live_browser.py)
    assert [e["text"] for e in events[:2]] == ["<script>alert(1)</script>",
                                               '<div hx-get="/jobs/new" hx-trigger="load">x</div>']
    assert "html" not in events[0] and "html" not in events[1]
    assert events[2]["html"] == '<span class="ansi-red">&lt;b&gt;red&lt;/b&gt;</span> &amp; done'


def test_any_text_arrives_as_printed_with_its_rank_and_stream(web, job, cookies):
    texts = ['quotes " and \\ backslash', "tab\tand\x07bell", "Größe ☃ 😀 \u2028 line separator", "", "{\"a\": 1}"]
    logs.append_lines(job.pk, [logs.Line(seq, seq % 3, "oes"[seq % 3], text) for seq, text in enumerate(texts)])
    finish(job)
    with httpx.stream("GET", f"{web.url}/jobs/{job.pk}/logs/stream", cookies=cookies, timeout=20) as response:
        events = [data for event, _, data in sse_events(response) if event == "line"]
    assert [(e["seq"], e["rank"], e["stream"], e["text"]) for e in events] == \
        [(seq, seq % 3, "oes"[seq % 3], text) for seq, text in enumerate(texts)]
    # the bell is a control character a browser would show as a box: that line comes with its HTML too
    assert [e.get("html") for e in events] == [None, "tab\tandbell", None, None, None]


def test_lines_travel_many_to_an_event_whose_id_is_the_last_seq_it_holds(web, job, cookies):
    logs.append_lines(job.pk, [logs.Line(seq, seq % 2, "o", f"line {seq}") for seq in range(450)])
    finish(job)
    with httpx.stream("GET", f"{web.url}/jobs/{job.pk}/logs/stream", cookies=cookies, timeout=20) as response:
        events = [(event, ident, data) for event, ident, data in sse_events(response, per_line=False)]
    lines = [(int(ident), [line[0] for line in data]) for event, ident, data in events if event == "lines"]
    # stored lines come 200 to a database read: three events, not 450
    assert [(last, seqs[0], len(seqs)) for last, seqs in lines] == [(199, 0, 200), (399, 200, 200), (449, 400, 50)]
    assert all(last == seqs[-1] for last, seqs in lines)
    assert events[-1][0] == "end" and events[-1][2]["last_seq"] == 449
    # with a rank filter the id is still the last line read, so a client resumes past what was passed over
    with httpx.stream("GET", f"{web.url}/jobs/{job.pk}/logs/stream?rank=0&after=397", cookies=cookies,
                      timeout=20) as response:
        got = [(ident, data) for event, ident, data in sse_events(response, per_line=False) if event == "lines"]
    assert got == [("449", [[s, 0, "o", f"line {s}"] for s in range(398, 450, 2)])]  # 449 is rank 1's


def test_the_stream_refuses_anonymous_users_and_other_peoples_jobs(web, job, django_user_model, client):
    assert httpx.get(f"{web.url}/jobs/{job.pk}/logs/stream", timeout=10).status_code == 403
    django_user_model.objects.create_user("mallory", password="x" * 12)
    client.login(username="mallory", password="x" * 12)
    response = httpx.get(f"{web.url}/jobs/{job.pk}/logs/stream", cookies=session_cookie(client), timeout=10)
    assert response.status_code == 404


def test_many_viewers_of_one_job_each_get_every_line_once(web, job, cookies):
    results: list[list[int]] = [[] for _ in range(8)]

    def follow(i):
        seqs, _ = read(web, job, cookies, params={"after": -1 if i % 2 else 10})
        results[i] = seqs

    emit(job, 0, 50)
    viewers = [threading.Thread(target=follow, args=(i,)) for i in range(8)]
    for v in viewers:
        v.start()
    for start in range(50, 1050, 50):
        emit(job, start, 50)
    finish(job)
    for v in viewers:
        v.join(30)
    for i, seqs in enumerate(results):
        assert seqs == list(range(0 if i % 2 else 11, 1050)), i


def test_a_client_whose_position_was_cut_by_retention_carries_on_after_the_marker(web, job, cookies):
    from trainhub.jobs import retention

    emit(job, 0, 20_000)
    retention.enforce(job.pk, 20_000, 10_000, "cpu")
    inside, _ = read(web, job, cookies, stop_after=5, params={"after": 5000})  # a line that no longer exists
    assert inside == list(range(11_000, 11_005))
    finish(job)
    everything, end = read(web, job, cookies)
    assert everything == list(range(0, 1001)) + list(range(11_000, 20_000)) and end["last_seq"] == 19_999


def test_rank_and_stream_filters_apply_to_the_live_stream(web, job, cookies):
    logs.append_lines(job.pk, [logs.Line(s, s % 2, "e" if s % 3 == 0 else "o", f"l{s}") for s in range(60)])
    finish(job)
    ranks, _ = read(web, job, cookies, params={"rank": 1})
    assert ranks == list(range(1, 60, 2))
    errors, end = read(web, job, cookies, params={"stream": "e", "rank": 0})
    assert errors == [s for s in range(60) if s % 6 == 0] and end["last_seq"] == 59


def test_a_hot_jobs_many_viewers_are_woken_together_with_every_line_and_little_delay(start_web, job, cookies):
    """With ``TRAINHUB_SSE_COALESCE_VIEWERS`` viewers or more, a line-a-tick job wakes them once per
    ``TRAINHUB_SSE_COALESCE_MS`` with all lines since, not once per line (one write per viewer per
    wake-up is what a thousand viewers cost: bench/log_fanout.py); each still gets every line, in
    order, within that window (and the status check's once a second). Without coalescing each viewer gets
    about one write per line."""

    server = start_web(TRAINHUB_SSE_COALESCE_VIEWERS="4", TRAINHUB_SSE_COALESCE_MS="250")
    viewers = 4
    got: list[dict] = [{"seqs": [], "writes": 0, "late": []} for _ in range(viewers)]
    printed: dict[int, float] = {}
    ready = threading.Barrier(viewers + 1)

    def follow(out):
        buf = b""
        with httpx.stream("GET", f"{server.url}/jobs/{job.pk}/logs/stream", cookies=cookies, timeout=20) as response:
            ready.wait()
            for chunk in response.iter_raw():
                now = time.monotonic()
                *events, buf = (buf + chunk).split(b"\n\n")
                seqs = line_seqs(events)
                out["writes"] += bool(seqs)
                out["seqs"] += seqs
                out["late"] += [now - printed[s] for s in seqs]
                if any(e.startswith(b"event: end") for e in events):
                    return

    threads = [threading.Thread(target=follow, args=(got[i],)) for i in range(viewers)]
    for t in threads:
        t.start()
    ready.wait(timeout=20)
    time.sleep(0.5)  # every viewer attached to the job's hub
    started = time.monotonic()
    for seq in range(150):  # a line every 20 ms and its write: 3 s or more
        printed[seq] = time.monotonic()
        emit(job, seq, 1)
        time.sleep(0.02)
    took = time.monotonic() - started
    finish(job)
    for t in threads:
        t.join(30)
    for out in got:
        assert out["seqs"] == list(range(150))
        assert out["writes"] <= took / 0.25 + 3, (out["writes"], took)  # one per 0.25 s, not ~150
        assert max(out["late"]) < 1.0, max(out["late"])  # the window (0.25 s) and a loaded machine's slack


def _database_connections(pid: int) -> int:
    """Database connections the process holds open: TCP connections to PostgreSQL's port, or handles
    on the SQLite file."""
    import psutil
    from django.db import connection

    process, sd = psutil.Process(pid), connection.settings_dict
    if connection.vendor == "sqlite":
        return sum(1 for f in process.open_files() if f.path == str(sd["NAME"]))
    port = int(sd["PORT"] or 5432)
    return sum(1 for c in process.net_connections(kind="tcp") if c.raddr and c.raddr.port == port)


def test_many_open_live_logs_share_a_few_database_connections(start_web, job, cookies):
    """An open live log holds no database connection of its own: its reads run in the server's few
    shared threads (trainhub/jobs/views/aiodb.py). Before, each stream kept the connection Django's
    per-request thread had opened until the stream ended: on PostgreSQL, whose default is 100
    connections, a web process failed the viewers after about the hundredth with 500s
    (bench/sse_connect.py, 300 viewers: 203 refused)."""
    import asyncio
    import os

    viewers = 40
    # more than one user's default limit (24): lifted here. With the default the test passed only while every
    # view checked the limit before any stream had started counting itself, and failed on a slower machine
    web = start_web(TRAINHUB_SSE_FINISHED_LINES="50000", TRAINHUB_SSE_MAX_PER_USER=str(viewers))
    shared_threads = min(32, (os.cpu_count() or 1) + 4)  # the event loop's default executor
    emit(job, 0, 5)

    async def follow(client, got: list, ready: asyncio.Event, opened: list) -> None:
        async with client.stream("GET", f"{web.url}/jobs/{job.pk}/logs/stream") as response:
            assert response.status_code == 200, await response.aread()
            buf = b""
            async for chunk in response.aiter_raw():
                *events, buf = (buf + chunk).split(b"\n\n")
                got += line_seqs(events)
                if len(got) == 5:
                    opened.append(1)
                    await ready.wait()
                if any(e.startswith(b"event: end") for e in events):
                    return

    async def main() -> tuple[list[list[int]], int]:
        got: list[list[int]] = [[] for _ in range(viewers)]
        ready, opened = asyncio.Event(), []
        limits = httpx.Limits(max_connections=viewers + 5)
        async with httpx.AsyncClient(cookies=cookies, limits=limits, timeout=60) as client:
            tasks = [asyncio.create_task(follow(client, got[i], ready, opened)) for i in range(viewers)]
            while len(opened) < viewers:
                if any(t.done() for t in tasks):
                    await next(t for t in tasks if t.done())  # a viewer that failed: its error
                await asyncio.sleep(0.05)
            held = _database_connections(web.proc.pid)  # every stream open and past its first reads
            ready.set()
            await asyncio.to_thread(closing, emit, job, 5, 5)
            await asyncio.to_thread(closing, finish, job)
            await asyncio.gather(*tasks)
        return got, held

    got, held = asyncio.run(main())
    assert all(seqs == list(range(10)) for seqs in got), [len(s) for s in got]
    assert held <= shared_threads + 1, f"{viewers} open streams held {held} database connections"
