"""A worker SIGKILLed mid-training: the job is recovered as an interruption (not against max_restarts)
and resumed; nothing is orphaned; a job that keeps losing its workers fails past TRAINHUB_MAX_INTERRUPTIONS."""
import os
import signal

import pytest

from django.conf import settings

from tests.conftest import job_processes, wait_for, wait_for_checkpoints
from trainhub.jobs.logs import read_lines
from trainhub.jobs.models import Job, JobEvent
from trainhub.jobs.services import job_submit

pytestmark = pytest.mark.slow
FAST_LEASES = {"TRAINHUB_LEASE_SECONDS": "5", "TRAINHUB_HEARTBEAT_SECONDS": "1", "TRAINHUB_GUARD_GRACE_SECONDS": "1"}
# ~7,500 steps at ~1 ms each: the fault must land mid-training. At 4 epochs the training itself took
# ~1 s, and the job's step (stored about once a second) could go from below 60 straight to the end.
EPOCHS = 30


def test_a_killed_worker_leaves_no_process_and_its_job_resumes_on_another(start_worker, cpu_pool, user):
    first = start_worker("cpu", name="first@test", extra_env=FAST_LEASES)
    job = job_submit(owner=user, data={  # no retries: losing the machine is not the job's failure
        "name": "survivor", "max_restarts": 0, "data": {"dataset": "synthetic", "samples": 20000},
        "train": {"epochs": 4}, "checkpoint": {"every_steps": 50}})
    wait_for_checkpoints(settings.TRAINHUB_RUNS_DIR, job.pk)  # the training has ~1 s left

    os.kill(first.proc.pid, signal.SIGKILL)
    wait_for(lambda: not job_processes(job.pk), timeout=15, message="the job's processes to die with their worker")

    start_worker("cpu", name="second@test", extra_env=FAST_LEASES)
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=300, message="the retried job to finish")  # 2 shared cores
    assert done.status == "succeeded", done.error
    assert (done.attempt, done.interruptions) == (2, 1)
    retry = JobEvent.objects.get(job=done, old="running", new="queued")
    assert retry.reason.startswith("interrupted: worker lost (worker first@test stopped renewing the lease)")
    log = "\n".join(line.text for line in read_lines(done.pk, limit=10000))
    assert "resum" in log.lower()


def test_a_worker_shut_down_gracefully_puts_its_job_back_and_another_worker_resumes_it(start_worker, cpu_pool, user):
    first = start_worker("cpu", name="leaving@test", extra_env=FAST_LEASES)
    job = job_submit(owner=user, data={
        "name": "handed-over", "data": {"dataset": "synthetic", "samples": 20000},
        "train": {"epochs": 4}, "checkpoint": {"every_steps": 50}})
    wait_for_checkpoints(settings.TRAINHUB_RUNS_DIR, job.pk)  # the training has ~1 s left

    first.stop(signal.SIGTERM)  # what Ctrl-C on `make run` or a service manager's stop sends
    assert first.proc.returncode is not None
    back = JobEvent.objects.get(job=job, old="running", new="queued")
    assert "the worker shut down" in back.reason
    assert not job_processes(job.pk)
    assert Job.objects.get(pk=job.pk).interruptions == 1  # not the job's failure: no retry of max_restarts used

    start_worker("cpu", name="staying@test", extra_env=FAST_LEASES)
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=180, message="the job to finish on the other worker")
    assert done.status == "succeeded", done.error
    assert done.worker.hostname == "staying@test"
    log = "\n".join(line.text for line in read_lines(done.pk, limit=10000))
    assert "resum" in log.lower()


def test_a_job_that_keeps_losing_its_worker_fails_past_the_interruption_cap(start_worker, cpu_pool, user):
    capped = {**FAST_LEASES, "TRAINHUB_MAX_INTERRUPTIONS": "1"}  # read by whichever worker reconciles
    job = job_submit(owner=user, data={
        "name": "crash-loop", "max_restarts": 3, "data": {"dataset": "synthetic", "samples": 20000},
        "train": {"epochs": 50}, "checkpoint": {"every_steps": 50}})
    for attempt, name in ((1, "one@test"), (2, "two@test")):
        worker = start_worker("cpu", name=name, extra_env=capped)
        wait_for(lambda: Job.objects.filter(pk=job.pk, status="running", attempt=attempt).exists(),
                 timeout=120, message=f"attempt {attempt} to run on {name}")
        os.kill(worker.proc.pid, signal.SIGKILL)

    start_worker("cpu", name="three@test", extra_env=capped)
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=120, message="the job to fail past the cap")
    assert done.status == "failed"
    assert "interrupted 2 times, more than TRAINHUB_MAX_INTERRUPTIONS=1 allows" in done.error, done.error
    reasons = list(JobEvent.objects.filter(job=done).values_list("new", "reason"))
    assert [new for new, _ in reasons] == ["queued", "running", "queued", "running", "failed"], reasons
    assert reasons[2][1].startswith("interrupted: worker lost (worker one@test"), reasons
