"""A real job on a real worker, followed live over SSE through uvicorn."""
from __future__ import annotations

import time

import httpx
import pytest

from tests.asgi_server import session_cookie, sse_events
from tests.conftest import wait_for
from trainhub.jobs.models import Job, LogLine

pytestmark = pytest.mark.slow


def follow(web, job_id: int, cookies: dict, timeout: float = 240) -> tuple[list[dict], dict]:
    """The job's lines as the viewer got them (each with ``seen``, the time it arrived) and the end event."""
    lines, end = [], None
    with httpx.stream("GET", f"{web.url}/jobs/{job_id}/logs/stream", cookies=cookies,
                      timeout=httpx.Timeout(timeout, connect=10)) as response:
        for event, _, data in sse_events(response):
            if event == "end":
                end = data
                break
            if event == "line":  # not "skipped": a finished log is sent from its newest 5,000 lines
                lines.append({**data, "seen": time.time()})
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


def test_a_log_nobody_follows_is_stored_each_second_unpublished_and_a_viewer_who_comes_gets_it_live(
        start_worker, cpu_pool, user_client, web):
    """A job printing 50 lines a second: while nobody follows it, its worker stores the lines about once a
    second (after a start's burst) and publishes none (a transaction a second instead of twenty); a viewer who opens the stream gets
    every line, in order, and what is printed from half a second after it came, live (workers/logwriter.py)."""
    import statistics
    from pathlib import Path

    from trainhub.jobs import logs
    from trainhub.pools.models import Workspace
    from workers.logwriter import UNWATCHED_BURST

    Workspace.objects.create(name="logbench", path=str(Path(__file__).resolve().parents[2] / "bench"))
    start_worker("cpu")
    spec = {"name": "watched", "mode": "script", "script": {"workspace": "logbench", "entry": "log_printer.py",
                                                            "args": ["500", "50"]}}  # 10 s
    response = user_client.post("/api/jobs", spec, content_type="application/json")
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]

    def printed(rows):  # (line number, the time it was printed, the time it was stored) of the printer's lines
        return [(int(text.split()[0]), float(text.split()[1]), at.timestamp()) for text, at in rows]

    wait_for(lambda: LogLine.objects.filter(job_id=job_id, stream="o").count() >= 100, timeout=120,
             message="two seconds of the job's lines to be stored")
    alone = printed(LogLine.objects.filter(job_id=job_id, stream="o").values_list("text", "at"))
    span = alone[-1][1] - alone[0][1]
    stores = len({at for *_, at in alone})
    assert stores <= span + UNWATCHED_BURST + 1, f"{stores} stores of {len(alone)} lines printed over {span:.1f} s"
    assert logs.redis_client().xlen(logs.stream_key(job_id)) == 0, "lines were published while nobody followed"
    stored_before = LogLine.objects.filter(job_id=job_id).order_by("-seq").values_list("seq", flat=True)[0]

    came = time.time()
    lines, end = follow(web, job_id, session_cookie(user_client), timeout=120)
    arrivals = [(int(number), float(at), line["seen"]) for line in lines if line["stream"] == "o"
                for number, at in [line["text"].split()]]
    job = Job.objects.get(pk=job_id)
    assert end["status"] == job.status == "succeeded"
    assert [line["seq"] for line in lines] == list(range(job.log_lines)), "the viewer missed or repeated lines"
    assert [n for n, *_ in arrivals] == list(range(500))
    live = [(n, at, seen) for n, at, seen in arrivals if at >= came + 0.5]
    assert len(live) >= 100, f"only {len(live)} lines were printed after the viewer came: too late to tell"
    latency = statistics.median(seen - at for _, at, seen in live)
    assert latency <= 0.35, f"median print -> viewer {latency * 1000:.0f} ms for lines printed after it came"

    followed = [row for row in printed(LogLine.objects.filter(job_id=job_id, stream="o").values_list("text", "at"))
                if row[1] >= came + 0.5]
    span = followed[-1][1] - followed[0][1]
    stores = len({at for *_, at in followed})
    assert stores >= 5 * span, f"only {stores} stores in {span:.1f} s while a viewer followed the job"
    first_published = logs.redis_client().xrange(logs.stream_key(job_id), count=1)[0][1]
    assert int(first_published[b"seq"]) > stored_before, "lines stored before the viewer came were published"
