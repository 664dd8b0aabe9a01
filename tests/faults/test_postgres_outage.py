"""PostgreSQL briefly unreachable from a worker: a TCP proxy between the worker and the database
closes every open connection and turns new ones away for a while, then lets them through again.

A job printing through a cut shorter than the lease succeeds with every line once and no retry;
the worker runs the next job. A cut longer than the lease stops the job, which the lease path
retries. ``job_finish`` retries while the database refuses new connections.
"""
import threading
import time

import pytest
from django.db import connection, connections

from tests.conftest import wait_for
from tests.faults.helpers import assert_ticks_complete, script, team_workspace, through
from trainhub.runs.lifecycle import Outcome, job_finish
from trainhub.jobs.logs import iter_all
from trainhub.jobs.models import Job, JobEvent, Status
from trainhub.jobs.services import job_submit

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql",
                                reason="cuts TCP connections to PostgreSQL; the suite runs on SQLite "
                                       "(set DATABASE_URL=postgres://...; the SQLite outage is "
                                       "tests/faults/test_database_outage.py)")

#: seconds the database is cut off in the first case: well under the lease (30 s), so renewals
#: fail for a while but the lease never runs out
SHORT_OUTAGE = 8
#: seconds cut off in the second case: more than its lease (6 s)
LONG_OUTAGE = 14


def history(job_id: int) -> list[tuple[str, str]]:
    return list(JobEvent.objects.filter(job_id=job_id).values_list("old", "new"))


def finished(job_id: int, timeout: float):
    return wait_for(lambda: Job.objects.filter(pk=job_id, status__in=["succeeded", "failed", "cancelled"]).first(),
                    timeout=timeout, message=f"job {job_id} to finish")


@pytest.mark.slow
def test_a_job_printing_through_dropped_postgres_connections_succeeds_with_every_line_once(proxy, start_worker,
                                                                                           cpu_pool, user, tmp_path):
    team_workspace(tmp_path)
    worker = start_worker("cpu", extra_env={"DATABASE_URL": through(proxy), "TRAINHUB_LEASE_SECONDS": "30",
                                            "TRAINHUB_HEARTBEAT_SECONDS": "2"})
    ticks = 500
    job = job_submit(owner=user, data=script("ticker.py", str(ticks), "0.04"))  # about 20 s of printing
    wait_for(lambda: Job.objects.get(pk=job.pk).log_lines > 40, timeout=90, message="the job to print")

    cut = proxy.down()
    time.sleep(1)  # a statement that reached the server before the cut has settled
    stored_at_cut = Job.objects.get(pk=job.pk).log_lines
    time.sleep(SHORT_OUTAGE - 1)
    stored_at_end = Job.objects.get(pk=job.pk).log_lines
    proxy.up()
    assert cut >= 1, "the worker held no database connection to cut"
    assert stored_at_end == stored_at_cut, "lines were stored while the database was unreachable"
    assert proxy.turned_away >= 1, "the worker did not try to reconnect during the outage"

    done = finished(job.pk, timeout=120)
    assert done.status == Status.SUCCEEDED, done.error
    assert done.attempt == 1 and done.exit_code == 0
    assert history(job.pk) == [("", "queued"), ("queued", "running"), ("running", "succeeded")]
    assert_ticks_complete(job.pk, ticks)
    assert done.log_lines > stored_at_end  # the lines printed during the outage came afterwards
    output = worker.output()
    assert f"job {job.pk}: database unavailable" in output and f"job {job.pk}: database back after" in output

    assert worker.proc.poll() is None, "the worker died"
    second = job_submit(owner=user, data=script("ticker.py", "3", "0"))
    assert finished(second.pk, timeout=60).status == Status.SUCCEEDED
    assert_ticks_complete(second.pk, 3)
    assert worker.proc.poll() is None


@pytest.mark.slow
def test_an_outage_longer_than_the_lease_stops_the_job_and_the_lease_path_retries_it(proxy, start_worker, cpu_pool,
                                                                                     user, tmp_path):
    team_workspace(tmp_path)
    worker = start_worker("cpu", extra_env={"DATABASE_URL": through(proxy), "TRAINHUB_LEASE_SECONDS": "6",
                                            "TRAINHUB_HEARTBEAT_SECONDS": "1"})
    # about 25 s: still printing when the worker gives up on its lease, 4 to 7 s into the outage, with
    # room for a loaded machine to notice the first lines late (15 s left it about 5 s)
    ticks = 500
    job = job_submit(owner=user, data=script("ticker.py", str(ticks), "0.05", max_restarts=1))
    wait_for(lambda: Job.objects.get(pk=job.pk).log_lines > 20, timeout=90, message="the job to print")
    assert proxy.down() >= 1
    time.sleep(LONG_OUTAGE)
    proxy.up()

    done = finished(job.pk, timeout=120)
    assert done.status == Status.SUCCEEDED, done.error
    assert done.attempt == 2
    assert history(job.pk) == [("", "queued"), ("queued", "running"), ("running", "queued"),
                               ("queued", "running"), ("running", "succeeded")]
    retry = JobEvent.objects.get(job_id=job.pk, old="running", new="queued").reason
    # whichever comes first once the database is back: the worker's own stop, or the lease path
    # (a heartbeat's reconcile) taking the expired lease away
    assert ((retry.startswith("attempt 1 failed (") and retry.endswith("); retrying")
             and "this worker lost the job's lease: the database was unreachable" in retry)
            or (retry.startswith("interrupted: worker lost (worker") and "stopped renewing the lease" in retry)), retry

    lines = [line for chunk in iter_all(job.pk) for line in chunk]
    assert [l.seq for l in lines] == list(range(lines[0].seq, lines[0].seq + len(lines))), "the log has a gap"
    texts = [l.text for l in lines]
    assert any(t.startswith("stopping: this worker lost the job's lease: the database was unreachable for")
               for t in texts), "the stop and its reason are not in the log"
    second_attempt = next(i for i, t in enumerate(texts) if t.startswith("attempt 2: starting"))
    assert [t for t in texts[second_attempt:] if t.startswith("tick ")] == [f"tick {i}" for i in range(ticks)]
    assert worker.proc.poll() is None, "the worker died"


def test_job_finish_retries_while_the_database_refuses_new_connections(transactional_db, live_settings, proxy,
                                                                      cpu_pool, user):
    """``retry_db`` must not reconnect while deciding whether to retry (it would raise the outage)."""
    job = job_submit(owner=user, data={"data": {"dataset": "iris"}, "model": {"name": "logreg"}})
    Job.objects.filter(pk=job.pk).update(status=Status.RUNNING, lease_token=1)
    job.refresh_from_db()
    result = {}

    def finish_through_the_proxy():
        conn = connections["default"]  # this thread's own connection, pointed at the proxy
        conn.settings_dict = {**conn.settings_dict, "HOST": "127.0.0.1", "PORT": str(proxy.port)}
        try:
            result["won"] = job_finish(job, Outcome(Status.SUCCEEDED, 0, "exited with code 0"))
        except Exception as exc:  # noqa: BLE001 — reported below
            result["error"] = exc
        finally:
            conn.close()

    proxy.down()
    finisher = threading.Thread(target=finish_through_the_proxy)
    finisher.start()
    wait_for(lambda: proxy.turned_away >= 2, timeout=30, message="job_finish to try to connect twice")
    proxy.up()
    finisher.join(60)
    assert "error" not in result, f"job_finish gave up: {result.get('error')!r}"
    assert result["won"] is True
    assert Job.objects.get(pk=job.pk).status == Status.SUCCEEDED


@pytest.mark.slow
def test_a_job_whose_message_arrives_while_the_database_is_down_runs_once_it_is_back(proxy, start_worker, cpu_pool,
                                                                                    user, tmp_path):
    """The claim fails: the message must not be used up (the job would wait forever without one)."""
    from trainhub.pools.models import Worker

    team_workspace(tmp_path)
    worker = start_worker("cpu", extra_env={"DATABASE_URL": through(proxy), "TRAINHUB_HEARTBEAT_SECONDS": "1"})
    wait_for(lambda: Worker.objects.filter(pool=cpu_pool).exists(), timeout=60, message="the worker to register")
    proxy.down()
    job = job_submit(owner=user, data=script("ticker.py", "5", "0"))  # sent through Redis, which is up
    wait_for(lambda: f"job {job.pk}: database unavailable while claiming" in worker.output(), timeout=60,
             message="the worker to have the message and fail to claim it")
    assert Job.objects.get(pk=job.pk).status == Status.QUEUED
    proxy.up()

    done = finished(job.pk, timeout=60)
    assert f"job {job.pk}: database unavailable while claiming" in worker.output()
    assert done.status == Status.SUCCEEDED, done.error
    assert history(job.pk) == [("", "queued"), ("queued", "running"), ("running", "succeeded")]
    assert_ticks_complete(job.pk, 5)
    assert worker.proc.poll() is None, "the worker died"


@pytest.mark.slow
@pytest.mark.parametrize("channel", ["", "page"], ids=["log-follower", "job-page"])
def test_a_live_log_viewer_gets_every_line_and_the_end_after_the_web_servers_database_was_cut(
        channel, proxy, live_settings, transactional_db, user, user_client, cpu_pool, tmp_path):
    """The web server's connections to PostgreSQL are cut for a few seconds while a viewer follows a
    running job: a follower of the log (the CLI, the API), or the job page's one live channel, whose
    status and sections the server reads from the database once a second. The viewer's stream stays open and the lines printed meanwhile reach it live from
    Redis; a viewer opening the log during the cut is told the database is unreachable (503), not a
    500. After the cut the stream goes on by itself: every line once and in order, then the end event
    when the job finishes. (Before: the server's log threads kept their dead connections, every status
    check failed from then on, the open stream was cut off and no viewer saw the end.)"""
    import httpx

    from tests.asgi_server import serving, session_cookie, sse_events
    from trainhub.jobs import logs

    job = Job.objects.create(owner=user, name="followed", mode="centralized", spec={}, pool=cpu_pool,
                             status="running")
    seen: list[int] = []
    ended: list[dict] = []
    with serving(live_settings, tmp_path / "uvicorn.log", DATABASE_URL=through(proxy)) as web:
        def follow():
            with httpx.stream("GET", f"{web.url}/jobs/{job.pk}/logs/stream", params={"channel": channel},
                              cookies=session_cookie(user_client), timeout=httpx.Timeout(90, connect=10)) as response:
                assert response.status_code == 200, response.read()
                for event, _, data in sse_events(response):
                    if event == "end":
                        ended.append(data)
                        return
                    if event == "line":
                        seen.append(data["seq"])

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        seq = 0

        def put(n: int) -> None:
            nonlocal seq
            logs.append_lines(job.pk, [logs.Line(s, 0, "o", f"line {s}") for s in range(seq, seq + n)])
            seq += n

        put(20)
        wait_for(lambda: len(seen) >= 20, timeout=30, message="the viewer to get the first lines")
        assert proxy.down() >= 1, "the web server held no database connection to cut"
        for _ in range(8):  # lines go on during the cut: the writer reaches the database directly
            put(5)
            time.sleep(0.5)
        wait_for(lambda: len(seen) >= seq, timeout=30, message="the lines printed during the cut, live from Redis")
        refused = httpx.get(f"{web.url}/jobs/{job.pk}/logs/stream", cookies=session_cookie(user_client), timeout=30)
        assert refused.status_code == 503 and "database is unreachable" in refused.text, refused.text
        assert refused.headers["Retry-After"]
        proxy.up()
        put(20)
        wait_for(lambda: len(seen) >= seq, timeout=30, message="the viewer to get the lines after the cut")
        Job.objects.filter(pk=job.pk).update(status="succeeded")
        reader.join(30)
        assert ended, f"no end event after the job finished ({web.output()[-1500:]})"
    assert seen == list(range(seq)), "a line was lost or sent twice"
    assert ended[0]["status"] == "succeeded"
