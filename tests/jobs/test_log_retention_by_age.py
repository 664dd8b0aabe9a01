"""Time-based log retention (``TRAINHUB_LOG_RETENTION_DAYS``): a job that ended longer ago than that
loses its log lines — not the job, its status, history or metrics — and its page says the log was
deleted by age; jobs that ended more recently and running jobs keep theirs. Run by hand
(``manage.py prune_logs``) and by a real worker's heartbeat."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from tests.conftest import wait_for
from trainhub.jobs import logs, retention
from trainhub.jobs.models import Job, LogLine, Metric


def ended(user, pool, name: str, days_ago: float, lines: int = 3_000) -> Job:
    job = Job.submit(owner=user, name=name, mode="centralized", spec={"name": name}, pool=pool)
    job.transition("running", reason="claimed by test-worker")
    logs.append_lines(job.pk, [logs.Line(s, 0, "o", f"{name} line {s}") for s in range(lines)])
    logs.record_metrics(job.pk, 10, {"loss": 0.25})
    job.transition("succeeded", reason="exited with code 0", exit_code=0)
    Job.objects.filter(pk=job.pk).update(finished_at=timezone.now() - timedelta(days=days_ago))
    return job


@pytest.fixture
def three_jobs(user, cpu_pool):
    old = ended(user, cpu_pool, "old", days_ago=45)
    recent = ended(user, cpu_pool, "recent", days_ago=5)
    running = Job.submit(owner=user, name="running", mode="centralized", spec={"name": "running"}, pool=cpu_pool)
    running.transition("running", reason="claimed by test-worker")
    Job.objects.filter(pk=running.pk).update(started_at=timezone.now() - timedelta(days=90))
    logs.append_lines(running.pk, [logs.Line(s, 0, "o", f"running line {s}") for s in range(100)])
    return old, recent, running


def assert_pruned_only_the_old_one(old, recent, running, user_client):
    assert list(LogLine.objects.filter(job=old).values_list("seq", "stream")) == [(0, "s")]
    marker = LogLine.objects.get(job=old).text
    assert marker.startswith(retention.PRUNED) and "30 days" in marker and "3,000 lines" in marker
    old.refresh_from_db()
    assert old.status == "succeeded" and old.events.count() == 3  # the job and its history stay
    assert list(Metric.objects.filter(job=old).values_list("name", "value")) == [("loss", 0.25)]
    assert LogLine.objects.filter(job=recent).count() == 3_000
    assert LogLine.objects.filter(job=running).count() == 100

    page = user_client.get(f"/jobs/{old.pk}").content.decode()
    assert 'id="log-pruned"' in page and "deleted by age" in page and retention.PRUNED in page
    assert 'id="log-pruned"' not in user_client.get(f"/jobs/{recent.pk}").content.decode()


def test_prune_logs_deletes_the_logs_of_jobs_that_ended_longer_ago_and_keeps_the_jobs(
        three_jobs, user_client, settings, capsys):
    old, recent, running = three_jobs
    settings.TRAINHUB_LOG_RETENTION_DAYS = 30
    call_command("prune_logs")
    assert "deleted the logs of 1 job(s) that ended more than 30 days ago" in capsys.readouterr().out
    assert_pruned_only_the_old_one(old, recent, running, user_client)
    call_command("prune_logs")  # again: nothing more to do, the marker stays
    assert "of 0 job(s)" in capsys.readouterr().out
    assert LogLine.objects.filter(job=old).count() == 1


def test_a_sweep_stops_after_about_a_million_lines_and_the_next_one_carries_on(user, cpu_pool, settings, monkeypatch):
    monkeypatch.setattr(retention, "PRUNE_LINES", 5_000)  # a million lines, scaled down
    jobs = [ended(user, cpu_pool, f"old-{i}", days_ago=40 + i) for i in range(4)]  # 3,000 lines each
    settings.TRAINHUB_LOG_RETENTION_DAYS = 30
    assert retention.prune_by_age() == (1, True)  # a second job would pass 5,000 lines
    assert [LogLine.objects.filter(job=j).count() for j in jobs] == [3_000, 3_000, 3_000, 1]  # oldest first
    assert retention.prune_by_age() == (1, True)
    assert retention.prune_by_age() == (1, True)
    assert retention.prune_by_age() == (1, False)
    assert retention.prune_by_age() == (0, False)
    assert all(LogLine.objects.filter(job=j).count() == 1 for j in jobs)


def test_a_pruned_jobs_log_reads_as_its_marker_line_alone_and_is_not_looked_at_again(three_jobs, settings):
    settings.TRAINHUB_LOG_RETENTION_DAYS = 30
    call_command("prune_logs")
    old = Job.objects.get(pk=three_jobs[0].pk)
    assert old.log_lines == 1
    assert logs.read_lines(old.pk) == [logs.Line(0, 0, "s", LogLine.objects.get(job=old).text)]


def test_logs_are_kept_forever_by_default_and_prune_logs_says_how_to_set_a_limit(three_jobs, settings):
    assert settings.TRAINHUB_LOG_RETENTION_DAYS == 0
    assert retention.prune_by_age() == (0, False) and retention.prune_if_due() == 0
    with pytest.raises(CommandError, match="TRAINHUB_LOG_RETENTION_DAYS"):
        call_command("prune_logs")
    assert LogLine.objects.filter(job=three_jobs[0]).count() == 3_000


@pytest.mark.slow
def test_a_workers_heartbeat_prunes_old_logs_by_itself(live_settings, transactional_db, start_worker, user,
                                                       cpu_pool, user_client):
    old, recent = ended(user, cpu_pool, "old", days_ago=45), ended(user, cpu_pool, "recent", days_ago=5)
    worker = start_worker("cpu", extra_env={"TRAINHUB_LOG_RETENTION_DAYS": "30", "TRAINHUB_HEARTBEAT_SECONDS": "1"})
    wait_for(lambda: LogLine.objects.filter(job=old).count() == 1, timeout=90,
             message=lambda: f"the heartbeat to prune the old log: {worker.output()[-1500:]}")
    assert LogLine.objects.get(job=old).text.startswith(retention.PRUNED)
    assert LogLine.objects.filter(job=recent).count() == 3_000
