"""Opening a *running* job's live log far behind its end costs a bounded catch-up, in lines and in
bytes: a ``skipped`` event, the newest lines, then the live ones — not the whole backlog replayed
(before: every stored line, 200 rows per database read, however long that took). Real uvicorn, the
workers' own ``LogWriter`` printing, a real SSE client."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.asgi_server import serving, session_cookie, sse_events
from trainhub.jobs import logs
from trainhub.jobs.models import Job
from workers.logwriter import DbOutage, LogWriter

pytestmark = pytest.mark.slow
KEEP, BUDGET = 2_000, 256 * 1024


@pytest.fixture
def web(live_settings, transactional_db, tmp_path):
    with serving(live_settings, tmp_path / "uvicorn.log", TRAINHUB_SSE_FINISHED_LINES=str(KEEP),
                 TRAINHUB_SSE_CATCHUP_BYTES=str(BUDGET)) as server:
        yield server


def printing(job: Job, backlog: int, width: int):
    """A LogWriter that has stored ``backlog`` lines of ``width`` characters, then a thread that goes on
    printing one line every 20 ms until the returned event is set."""
    writer = LogWriter(job, DbOutage(job.pk))
    for lo in range(0, backlog, 5_000):
        writer.lines.put(("o", [(0, f"{s:07d} " + "x" * (width - 8)) for s in range(lo, min(backlog, lo + 5_000))]))
        assert writer.flush()
    stop = threading.Event()

    def live():
        while not stop.is_set():
            writer.lines.put(("o", [(0, "live line")]))
            writer.flush()
            time.sleep(0.02)
    thread = threading.Thread(target=live)
    thread.start()
    return stop, thread


def follow_until_live(web, job: Job, cookies: dict, live_lines: int = 20):
    """Open the stream from the start; read until ``live_lines`` lines printed after it opened arrived.
    Returns the events, the bytes read before the first live line and the seconds that took."""
    events, size, started = [], 0, time.monotonic()
    first_live = None
    with httpx.stream("GET", f"{web.url}/jobs/{job.pk}/logs/stream", cookies=cookies,
                      timeout=httpx.Timeout(60, connect=10)) as response:
        assert response.status_code == 200

        class Counted:
            @staticmethod
            def iter_lines():
                nonlocal size
                for raw in response.iter_lines():
                    size += len(raw) + 1
                    yield raw

        for event, _, data in sse_events(Counted()):
            events.append((event, data))
            if event == "line" and data["text"] == "live line":
                first_live = first_live or (size, time.monotonic() - started)
                live_lines -= 1
                if not live_lines:
                    return events, *first_live
    raise AssertionError(f"the stream ended before {live_lines} live lines: {events[-3:]}")


@pytest.mark.parametrize("backlog, width, most", [(100_000, 60, KEEP), (400, 16_000, BUDGET // 16_000)])
def test_opening_a_running_jobs_log_far_behind_skips_to_its_newest_lines_then_follows_live(
        web, user, user_client, cpu_pool, backlog, width, most):
    """100,000 short lines (6 MB): the newest 2,000 lines; 400 lines of 16,000 characters (6.4 MB):
    the newest 16, the bytes bound (256 KB here, 8 MB by default)."""
    job = Job.objects.create(owner=user, name="chatty", mode="centralized", spec={}, pool=cpu_pool, status="running")
    stop, thread = printing(job, backlog, width)
    try:
        events, size, seconds = follow_until_live(web, job, session_cookie(user_client))
    finally:
        stop.set()
        thread.join()
    assert events[0][0] == "skipped", events[:2]
    skipped = events[0][1]
    assert skipped["first"] == 0 and skipped["older_url"] == f"/jobs/{job.pk}/logs/page?before={skipped['last'] + 1}"
    seqs = [data["seq"] for event, data in events if event == "line"]
    assert seqs == list(range(skipped["last"] + 1, seqs[-1] + 1))  # gap-free from the newest lines on
    caught_up = [data for event, data in events if event == "line" and data["text"] != "live line"]
    assert most // 2 <= len(caught_up) <= most, len(caught_up)
    assert caught_up[-1]["text"].startswith(f"{backlog - 1:07d} ")
    whole = backlog * width
    assert size < whole / 4, (size, whole)  # the backlog is not replayed (its frames are bigger than its text)
    assert seconds < 30, seconds  # wide: a loaded 2-core machine; the whole backlog is not read either


def test_a_client_a_little_behind_a_running_job_gets_every_line_it_missed(web, user, user_client, cpu_pool):
    job = Job.objects.create(owner=user, name="calm", mode="centralized", spec={}, pool=cpu_pool, status="running")
    logs.append_lines(job.pk, [logs.Line(s, 0, "o", f"line {s}") for s in range(1_500)])
    stop, thread = printing(job, 0, 10)
    try:
        with httpx.stream("GET", f"{web.url}/jobs/{job.pk}/logs/stream?after=99", cookies=session_cookie(user_client),
                          timeout=httpx.Timeout(60, connect=10)) as response:
            seqs = []
            for event, _, data in sse_events(response):
                assert event == "line", (event, data)
                seqs.append(data["seq"])
                if len(seqs) == 1_500:
                    break
    finally:
        stop.set()
        thread.join()
    assert seqs == list(range(100, 1_600))
