"""The job page's sections (status, progress, history, metrics, files) ride the log stream as
named events (``?channel=page``), through uvicorn, with a real Redis."""
from __future__ import annotations

import threading

import httpx
import pytest

from tests.asgi_server import session_cookie, sse_events
from trainhub.jobs import rundir
from trainhub.jobs import logs
from trainhub.jobs.models import Job

pytestmark = pytest.mark.slow


@pytest.fixture
def job(user, cpu_pool):
    job = Job.objects.create(owner=user, name="sections", mode="centralized", spec={}, pool=cpu_pool)
    job.transition("running", reason="claimed by test-worker")
    logs.record_progress(job.pk, 10, 100)
    logs.record_metrics(job.pk, 10, {"loss": 0.9})
    return job


def follow(web, job, cookies, until, params=None, headers=None):
    """(event, data) pairs of the page channel until ``until(event, data)`` or the ``end`` event."""
    got = []
    with httpx.stream("GET", f"{web.url}/jobs/{job.pk}/logs/stream", cookies=cookies, timeout=20,
                      params={"channel": "page", **(params or {})}, headers=headers or {}) as response:
        assert response.status_code == 200
        for event, ident, data in sse_events(response):
            got.append((event, ident, data))
            if event == "end" or until(event, data):
                break
    return got


def names(got):
    return [event for event, _, _ in got]


def test_a_new_connection_starts_with_a_snapshot_of_every_section(web, job, user_client):
    logs.append_lines(job.pk, [logs.Line(i, 0, "o", f"line {i}") for i in range(3)])
    got = follow(web, job, session_cookie(user_client), lambda e, d: e == "metrics")
    assert [(e, int(i)) for e, i, _ in got if e == "line"] == [("line", 0), ("line", 1), ("line", 2)]
    sections = {e: d for e, _, d in got if e != "line"}
    assert set(sections) == {"status", "history", "files", "progress", "metrics"}
    assert sections["status"]["status"] == "running" and 'id="job-status"' in sections["status"]["html"]
    assert sections["status"]["reason"] == "claimed by test-worker"
    assert "csrfmiddlewaretoken" in sections["status"]["html"]  # the Cancel form works from the live HTML
    assert "claimed by test-worker" in sections["history"]["html"]
    assert sections["progress"]["step"] == 10 and sections["progress"]["total_steps"] == 100
    assert sections["metrics"]["series"] == {"loss": {"steps": [10], "values": [0.9]}}


def test_changes_arrive_as_they_happen_and_the_stream_ends_with_the_final_status(web, job, user_client):
    def work():
        logs.record_progress(job.pk, 50, 100)
        logs.record_metrics(job.pk, 50, {"loss": 0.5})
        path = rundir.run_dir(job.pk) / "model.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"weights")
        job.transition("succeeded", reason="exit code 0")

    timer = threading.Timer(1.5, work)
    timer.start()
    got = follow(web, job, session_cookie(user_client), lambda e, d: False, params={"lines": "0"})
    timer.join()
    assert names(got)[-1] == "end" and got[-1][2]["status"] == "succeeded"
    assert "line" not in names(got)  # lines=0: sections only
    last = {e: d for e, _, d in got}
    assert last["status"]["status"] == "succeeded" and last["status"]["active"] is False
    assert "exit code 0" in last["history"]["html"] and "model.pt" in last["files"]["html"]
    assert last["progress"]["step"] == 50
    points = [d["series"]["loss"] for e, _, d in got if e == "metrics"]
    assert points[0] == {"steps": [10], "values": [0.9]} and points[-1] == {"steps": [50], "values": [0.5]}


def test_a_reconnect_shows_the_true_status_that_changed_while_away(web, job, user_client):
    cookies = session_cookie(user_client)
    first = follow(web, job, cookies, lambda e, d: e == "metrics")
    assert {e: d for e, _, d in first}["status"]["status"] == "running"
    job.transition("failed", reason="worker lost")
    again = follow(web, job, cookies, lambda e, d: False, headers={"Last-Event-ID": "-1"})
    sections = {e: d for e, _, d in again}
    assert sections["status"]["status"] == "failed" and sections["status"]["reason"] == "worker lost"
    assert "worker lost" in sections["history"]["html"] and names(again)[-1] == "end"


def test_without_the_page_channel_the_stream_carries_lines_only(web, job, user_client):
    logs.append_lines(job.pk, [logs.Line(0, 0, "o", "hello")])
    job.transition("succeeded", reason="test")
    got = follow(web, job, session_cookie(user_client), lambda e, d: False, params={"channel": ""})
    assert names(got) == ["line", "end"]
