"""The database briefly unavailable to a worker: no log line lost or duplicated, metrics
read again, the job keeps running; a worker that cannot renew for a whole lease stops."""
import json
import sqlite3
import threading
import time

import pytest
from django.db import OperationalError, connection

from tests.conftest import wait_for
from tests.faults.helpers import assert_ticks_complete, script, team_workspace
from trainhub.jobs import logs
from trainhub.runs.lifecycle import Outcome, job_finish
from trainhub.jobs.logs import metric_series, read_lines
from trainhub.jobs.models import Job, Status
from trainhub.jobs.services import job_submit
from workers import executor, logwriter
from workers.executor import Execution


class Outage:
    """Makes a function raise OperationalError while ``down`` is set."""

    def __init__(self, real):
        self.real, self.down, self.failures = real, True, 0

    def __call__(self, *args, **kwargs):
        if self.down:
            self.failures += 1
            raise OperationalError("server closed the connection unexpectedly")
        return self.real(*args, **kwargs)


@pytest.fixture
def execution(cpu_pool, user, settings, tmp_path):
    settings.TRAINHUB_RUNS_DIR = tmp_path / "runs"
    job = job_submit(owner=user, data={"data": {"dataset": "iris"}, "model": {"name": "logreg"}})
    Job.objects.filter(pk=job.pk).update(status=Status.RUNNING, lease_token=1)
    job.refresh_from_db()
    run = Execution(job)
    run.run_dir.mkdir(parents=True)
    return run


def printed(run, texts, stream="o"):
    run.lines.put((stream, [(0, t) for t in texts]))


def test_lines_printed_during_an_outage_are_stored_once_each_when_it_ends(execution, monkeypatch):
    outage = Outage(logs.append_lines)
    monkeypatch.setattr(logs, "append_lines", outage)
    printed(execution, ["a", "b"])
    assert execution.flush_lines() is False
    printed(execution, ["c"])
    execution.db_retry_at = 0
    assert execution.flush_lines() is False
    assert outage.failures == 2
    outage.down = False
    execution.db_retry_at = 0
    printed(execution, ["d"])
    assert execution.flush_lines() is True
    assert [(l.seq, l.text) for l in read_lines(execution.job.pk)] == [(0, "a"), (1, "b"), (2, "c"), (3, "d")]


def test_a_full_pending_buffer_drops_new_lines_with_a_marker_saying_how_many(execution, monkeypatch):
    monkeypatch.setattr(logwriter, "PENDING_MAX", 3)
    outage = Outage(logs.append_lines)
    monkeypatch.setattr(logs, "append_lines", outage)
    printed(execution, ["a", "b", "c"])
    execution.flush_lines()
    printed(execution, ["d", "e"])
    execution.flush_lines()
    outage.down = False
    execution.db_retry_at = 0
    assert execution.drain(5)
    printed(execution, ["f"])
    assert execution.flush_lines()
    stored = read_lines(execution.job.pk)
    texts = [l.text for l in stored]
    assert texts[:3] == ["a", "b", "c"] and texts[4:] == ["f"]
    assert "2 lines dropped" in texts[3]
    assert [l.seq for l in stored] == [0, 1, 2, 3, 4]


def test_metrics_read_during_an_outage_are_read_again_afterwards(execution, monkeypatch):
    (execution.run_dir / "events.jsonl").write_text(json.dumps({"type": "metrics", "step": 1,
                                                                "values": {"loss": 0.5}}) + "\n")
    outage = Outage(logs.record_metric_rows)  # what the executor stores a pump's metrics with
    monkeypatch.setattr(logs, "record_metric_rows", outage)
    execution.pump_events()
    assert execution.events_offset == 0
    outage.down = False
    execution.pump_events()
    assert metric_series(execution.job.pk) == {"loss": [(1, 0.5)]}
    assert execution.events_offset > 0


def test_a_renewal_failing_on_the_database_is_not_a_lost_lease_until_the_lease_has_passed(execution, monkeypatch,
                                                                                            settings):
    settings.TRAINHUB_LEASE_SECONDS = 30
    monkeypatch.setattr(executor, "job_renew", Outage(None))
    execution.renewed = 100.0
    assert execution.renew(120.0) is None
    status, reason = execution.renew(131.0)
    assert status == Status.FAILED and "database was unreachable" in reason


def test_job_finish_retries_through_a_short_outage(transactional_db, execution, monkeypatch):
    real = Job.objects.filter
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] <= 2:
            raise OperationalError("database is locked")
        return real(*args, **kwargs)

    monkeypatch.setattr(Job.objects, "filter", flaky)
    assert job_finish(execution.job, Outcome(Status.SUCCEEDED, 0, "exited with code 0"))
    monkeypatch.undo()
    assert Job.objects.get(pk=execution.job.pk).status == Status.SUCCEEDED


@pytest.mark.slow
def test_a_job_printing_through_a_locked_database_succeeds_with_every_line_once(start_worker, cpu_pool, user,
                                                                                 tmp_path):
    if connection.vendor != "sqlite":
        pytest.skip("locks the SQLite file; on PostgreSQL tests/faults/test_postgres_outage.py cuts the connections instead")
    team_workspace(tmp_path)
    # a long lease: the lock outlasts SQLite's 30 s busy timeout, so the worker sees real errors
    worker = start_worker("cpu", extra_env={"TRAINHUB_LEASE_SECONDS": "120", "TRAINHUB_HEARTBEAT_SECONDS": "2"})
    ticks = 900
    job = job_submit(owner=user, data=script("ticker.py", str(ticks), "0.05"))
    wait_for(lambda: Job.objects.get(pk=job.pk).log_lines > 20, timeout=60, message="the job to print")

    locked = threading.Event()

    def hold_lock(seconds):
        db = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, timeout=30)
        db.execute("BEGIN EXCLUSIVE")
        locked.set()
        time.sleep(seconds)
        db.execute("ROLLBACK")
        db.close()

    holder = threading.Thread(target=hold_lock, args=(34,))
    holder.start()
    locked.wait(30)
    holder.join()
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=120, message="the job to finish")
    assert done.status == "succeeded", done.error
    assert_ticks_complete(job.pk, ticks)
    # the lock really reached the worker: it kept the lines, said so, and said when the database was back
    assert f"job {job.pk}: database unavailable (database is locked)" in worker.output()
    assert f"job {job.pk}: database back after" in worker.output()
