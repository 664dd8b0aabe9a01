"""The metric cap's per-job counts (``trainhub/jobs/metriccap.py``) are bounded in a worker that runs
through many jobs: the least recently stored job is forgotten, and counted again from the database
when it stores once more, so forgetting it never lets its series pass the cap."""
from __future__ import annotations

from trainhub.jobs import logs, metriccap
from trainhub.jobs.models import Job, Metric


def test_a_worker_keeps_the_counts_of_its_latest_jobs_only_and_recounts_a_forgotten_one(
        db, user, cpu_pool, monkeypatch, settings):
    settings.TRAINHUB_METRIC_MAX_POINTS = 10
    monkeypatch.setattr(metriccap, "TRACKED_JOBS", 2)
    monkeypatch.setattr(metriccap, "_POINTS", {})
    jobs = [Job.objects.create(owner=user, name=f"job {i}", mode="centralized", spec={}, pool=cpu_pool)
            for i in range(3)]
    for job in jobs:
        logs.record_metrics(job.pk, 1, {"loss": 1.0, "lr": 0.1})
    assert list(metriccap._POINTS) == [jobs[1].pk, jobs[2].pk]  # the first job's count is gone
    # the first job logs on: its count comes from the database again, and the cap still holds
    for step in range(2, 9):
        logs.record_metrics(jobs[0].pk, step, {"loss": 1.0 / step, "lr": 0.1})
    stored = Metric.objects.filter(job=jobs[0]).count()
    assert stored <= 10 and metriccap._POINTS[jobs[0].pk] == stored
    assert "thinned" in Job.objects.get(pk=jobs[0].pk).metrics_note
    assert len(metriccap._POINTS) == 2
