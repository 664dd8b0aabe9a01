"""The same Celery message delivered twice runs the job once (compare-and-set claim)."""
import time

import pytest

from tests.conftest import wait_for
from trainhub.jobs.models import Job, JobEvent
from trainhub.jobs.services import RUN_JOB_TASK, job_submit

pytestmark = pytest.mark.slow


def test_a_duplicate_message_for_the_same_attempt_is_a_no_op(start_worker, cpu_pool, user):
    from workers.app import app

    start_worker("cpu", slots=2)
    job = job_submit(owner=user, data={"name": "once", "data": {"dataset": "iris"}, "model": {"name": "logreg"},
                                       "train": {"epochs": 1}})
    app.send_task(RUN_JOB_TASK, args=[job.pk, job.attempt], queue="cpu")  # the duplicate
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=120, message="the job to finish")
    assert done.status == "succeeded"
    # Give the duplicate time to be handled too, then check the job ran exactly once.
    time.sleep(3)
    assert JobEvent.objects.filter(job=job, new="running").count() == 1
    from trainhub.jobs.logs import read_lines

    # the executor's start line, once per process tree started (the runner's own "…: starting" is another line)
    assert sum(line.text.startswith("attempt 1: starting") for line in read_lines(job.pk, limit=10000)) == 1


def test_a_stale_message_from_an_earlier_attempt_is_ignored(start_worker, cpu_pool, user):
    from workers.app import app

    job = job_submit(owner=user, data={"name": "stale", "data": {"dataset": "iris"}, "model": {"name": "logreg"},
                                       "train": {"epochs": 1}})
    Job.objects.filter(pk=job.pk).update(attempt=2)  # as after a retry: the first message is now stale
    app.send_task(RUN_JOB_TASK, args=[job.pk, 2], queue="cpu")  # behind the stale one in the queue
    start_worker("cpu")
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=120, message="the job to finish")
    assert done.status == "succeeded" and done.attempt == 2
    assert JobEvent.objects.filter(job=job, new="running").count() == 1
