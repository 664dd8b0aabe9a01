"""A job that prints faster than its log is stored: the job is slowed down (its pipe fills),
and every line is stored once, in order — nothing is dropped while the database is up.

A real job process prints; the database is made slow (each batch insert sleeps) and the
buffers small, so the backlog that a million-line flood builds on a real machine builds here
in a few thousand lines."""
import time

from tests.faults.helpers import assert_ticks_complete, script, team_workspace
from trainhub.jobs import logs
from trainhub.jobs.models import Job, Status
from trainhub.jobs.services import job_submit
from workers import logwriter
from workers.backends import base
from workers.executor import Execution

LINES = 20_000


def test_a_flood_faster_than_the_database_is_stored_whole_and_in_order(cpu_pool, user, settings, tmp_path,
                                                                        monkeypatch):
    settings.TRAINHUB_RUNS_DIR = tmp_path / "runs"
    team_workspace(tmp_path)
    monkeypatch.setattr(logwriter, "PENDING_MAX", 500)
    monkeypatch.setattr(logwriter, "FLUSH_MAX", 200)
    monkeypatch.setattr(base, "OUTPUT_LINES", 5_000)  # more than the pending buffer: the end drains it in turns
    real_append = logs.append_lines

    def slow_append(job_id, lines, **kwargs):  # a database that takes ~20,000 lines/s at most
        time.sleep(0.01)
        return real_append(job_id, lines, **kwargs)

    monkeypatch.setattr(logs, "append_lines", slow_append)
    job = job_submit(owner=user, data=script("ticker.py", str(LINES), "0"))
    Job.objects.filter(pk=job.pk).update(status=Status.RUNNING, lease_token=1)
    job.refresh_from_db()

    outcome = Execution(job).run()

    assert outcome.status == Status.SUCCEEDED, outcome.reason
    texts = [line.text for chunk in logs.iter_all(job.pk) for line in chunk]
    assert not any("lines dropped" in text for text in texts)
    assert_ticks_complete(job.pk, LINES)
