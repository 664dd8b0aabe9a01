"""A real job on a real worker, followed live over SSE through uvicorn."""
from __future__ import annotations

import httpx
import pytest

from tests.asgi_server import session_cookie, sse_events
from tests.conftest import wait_for
from trainhub.jobs.models import Job, LogLine

pytestmark = pytest.mark.slow


def follow(web, job_id: int, cookies: dict, timeout: float = 240) -> tuple[list[dict], dict]:
    lines, end = [], None
    with httpx.stream("GET", f"{web.url}/jobs/{job_id}/logs/stream", cookies=cookies,
                      timeout=httpx.Timeout(timeout, connect=10)) as response:
        for event, _, data in sse_events(response):
            if event == "end":
                end = data
                break
            if event == "message":  # not "skipped": a finished log is sent from its newest 5,000 lines
                lines.append(data)
    return lines, end


# DeepSpeed's run adds the engine, not another database path: once, in the SQLite pass
@pytest.mark.parametrize("mode, extra", [("ddp", {}), pytest.param("deepspeed", {"deepspeed": {"zero_stage": 2}},
                                                                   marks=pytest.mark.db_agnostic)])
def test_a_two_rank_job_tags_every_line_with_its_rank_and_streams_them_all(
        start_worker, cpu_pool, user_client, web, mode, extra):
    worker = start_worker("cpu")
    spec = {"name": f"{mode}-live", "mode": mode, "resources": {"procs_per_node": 2}, "train": {"epochs": 1}, **extra}
    response = user_client.post("/api/jobs", spec, content_type="application/json")
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]

    lines, end = follow(web, job_id, session_cookie(user_client))
    job = Job.objects.get(pk=job_id)
    assert job.status == "succeeded", (job.error, worker.output()[-3000:])
    assert end == {"status": "succeeded", "last_seq": job.log_lines - 1}
    assert [l["seq"] for l in lines] == list(range(job.log_lines))  # gap-free, duplicate-free, complete
    ready = {l["rank"]: l["text"] for l in lines if " ready on " in l["text"]}
    assert set(ready) == {0, 1}, [l["text"] for l in lines][:40]
    assert ready[1].startswith("rank 1/2 ready") and not ready[1].startswith("[rank")
    stored = set(LogLine.objects.filter(job_id=job_id).values_list("rank", flat=True))
    assert stored == {0, 1}


def test_a_job_that_is_already_running_is_followed_from_the_middle_without_gaps(
        start_worker, cpu_pool, user_client, web):
    start_worker("cpu")
    spec = {"name": "digits", "train": {"epochs": 2}}
    job_id = user_client.post("/api/jobs", spec, content_type="application/json").json()["id"]
    wait_for(lambda: Job.objects.get(pk=job_id).log_lines >= 2, timeout=120, message="the job to print")
    cookies = session_cookie(user_client)
    with httpx.stream("GET", f"{web.url}/jobs/{job_id}/logs/stream", cookies=cookies, timeout=60) as response:
        first = []
        for event, _, data in sse_events(response):
            first.append(data["seq"])
            if len(first) == 2:
                break
    end = None
    with httpx.stream("GET", f"{web.url}/jobs/{job_id}/logs/stream", cookies=cookies,
                      headers={"Last-Event-ID": str(first[-1])}, timeout=240) as response:
        rest = []
        for event, _, data in sse_events(response):
            if event == "end":
                end = data
                break
            rest.append(data["seq"])
    job = Job.objects.get(pk=job_id)
    assert end["status"] == job.status == "succeeded"
    assert first + rest == list(range(job.log_lines))


def test_a_pool_with_a_retention_cap_keeps_the_head_and_the_newest_lines_of_a_chatty_job(
        start_worker, cpu_pool, user_client, web):
    from pathlib import Path

    from trainhub.jobs import retention
    from trainhub.pools.models import Workspace

    Workspace.objects.create(name="logbench", path=str(Path(__file__).resolve().parents[2] / "bench"))
    start_worker("cpu", extra_env={"TRAINHUB_LOG_RETENTION": "cpu=10000"})
    spec = {"name": "chatty", "mode": "script", "script": {"workspace": "logbench", "entry": "log_printer.py",
                                                           "args": ["40000", "0"]}}
    response = user_client.post("/api/jobs", spec, content_type="application/json")
    assert response.status_code == 201, response.content
    lines, end = follow(web, response.json()["id"], session_cookie(user_client))
    job = Job.objects.get(pk=response.json()["id"])
    assert job.status == "succeeded" and end["last_seq"] == job.log_lines - 1
    start, stop = retention.cut_range(job.pk)
    assert start == 1000 and LogLine.objects.filter(job=job).count() <= 10_000 + 5_000
    seqs = [l["seq"] for l in lines]
    assert seqs == sorted(set(seqs)) and seqs[-1] == job.log_lines - 1  # in order, once each, to the end
    assert lines[-1]["text"].startswith("finished")
