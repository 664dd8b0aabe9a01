"""Redis restarted mid-job: the job finishes with every line and metric, and a job submitted
while Redis was down is sent again and runs."""
import pytest

from tests.conftest import wait_for
from tests.faults.helpers import assert_ticks_complete, script, team_workspace
from trainhub.jobs.logs import metric_series
from trainhub.jobs.models import Job
from trainhub.jobs.services import job_submit


FAST = {"TRAINHUB_HEARTBEAT_SECONDS": "1"}


def finished(job_id, timeout=120):
    return wait_for(lambda: Job.objects.filter(pk=job_id, status__in=["succeeded", "failed", "cancelled"]).first(),
                    timeout=timeout, message=f"job {job_id} to finish")


@pytest.mark.slow
def test_a_redis_restart_loses_no_line_and_a_job_submitted_meanwhile_still_runs(start_worker, cpu_pool, user,
                                                                                tmp_path, redis_server):
    team_workspace(tmp_path)
    start_worker("cpu", slots=2, extra_env=FAST)
    ticks = 200
    printing = job_submit(owner=user, data=script("ticker.py", str(ticks), "0.05"))
    training = job_submit(owner=user, data={"data": {"dataset": "synthetic", "samples": 4000},
                                            "train": {"epochs": 3}})
    wait_for(lambda: Job.objects.get(pk=printing.pk).log_lines > 20, timeout=60, message="the job to print")
    redis_server.stop()
    try:
        during = job_submit(owner=user, data={"data": {"dataset": "iris"}, "model": {"name": "logreg"},
                                              "train": {"epochs": 1}})
        assert Job.objects.get(pk=during.pk).celery_task_id == ""  # the send failed; the job waits
    finally:
        redis_server.start()
    assert finished(printing.pk).status == "succeeded"
    assert_ticks_complete(printing.pk, ticks)
    done = finished(training.pk)
    assert done.status == "succeeded", done.error
    assert len(metric_series(done.pk).get("train_loss", metric_series(done.pk).get("loss", []))) >= 3
    resent = finished(during.pk, timeout=180)
    assert resent.status == "succeeded", resent.error


def test_a_worker_that_died_idle_gets_its_reserved_messages_sent_again_once(cpu_pool, user, monkeypatch, settings):
    from datetime import timedelta

    from django.core.cache import cache
    from django.utils import timezone

    from trainhub.jobs import services
    from trainhub.runs.lifecycle import jobs_reconcile
    from trainhub.pools.models import Worker

    cache.clear()
    sent = []
    monkeypatch.setattr(services, "job_enqueue", lambda job: sent.append(job.pk))
    job = job_submit(owner=user, data={"data": {"dataset": "iris"}, "model": {"name": "logreg"}})
    Job.objects.filter(pk=job.pk).update(celery_task_id="held-by-the-dead-worker")
    Worker.objects.create(hostname="gone@test", pool=cpu_pool,
                          last_heartbeat=timezone.now() - timedelta(seconds=settings.TRAINHUB_LEASE_SECONDS + 5))
    jobs_reconcile()
    assert sent == [job.pk]
    Job.objects.filter(pk=job.pk).update(celery_task_id="sent-again")
    jobs_reconcile()
    assert sent == [job.pk]  # once per death, not at every heartbeat
