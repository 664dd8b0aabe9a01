"""A worker SIGKILLed mid-training: the job is recovered, retried and resumed; nothing is orphaned."""
import os
import signal

import pytest

from tests.conftest import job_processes, wait_for
from trainhub.jobs.logs import read_lines
from trainhub.jobs.models import Job, JobEvent
from trainhub.jobs.services import job_submit

pytestmark = pytest.mark.slow
FAST_LEASES = {"TRAINHUB_LEASE_SECONDS": "5", "TRAINHUB_HEARTBEAT_SECONDS": "1", "TRAINHUB_GUARD_GRACE_SECONDS": "1"}


def test_a_killed_worker_leaves_no_process_and_its_job_resumes_on_another(start_worker, cpu_pool, user):
    first = start_worker("cpu", name="first@test", extra_env=FAST_LEASES)
    job = job_submit(owner=user, data={
        "name": "survivor", "max_restarts": 1, "data": {"dataset": "synthetic", "samples": 20000},
        "train": {"epochs": 4}, "checkpoint": {"every_steps": 50}})
    wait_for(lambda: Job.objects.get(pk=job.pk).step >= 60, timeout=120, message="a checkpoint to be written")

    os.kill(first.proc.pid, signal.SIGKILL)
    wait_for(lambda: not job_processes(job.pk), timeout=15, message="the job's processes to die with their worker")

    start_worker("cpu", name="second@test", extra_env=FAST_LEASES)
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=180, message="the retried job to finish")
    assert done.status == "succeeded", done.error
    assert done.attempt == 2
    retry = JobEvent.objects.get(job=done, old="running", new="queued")
    assert "lost worker" in retry.reason
    log = "\n".join(line.text for line in read_lines(done.pk, limit=10000))
    assert "resum" in log.lower()


def test_a_worker_shut_down_gracefully_puts_its_job_back_and_another_worker_resumes_it(start_worker, cpu_pool, user):
    first = start_worker("cpu", name="leaving@test", extra_env=FAST_LEASES)
    job = job_submit(owner=user, data={
        "name": "handed-over", "data": {"dataset": "synthetic", "samples": 20000},
        "train": {"epochs": 4}, "checkpoint": {"every_steps": 50}})
    wait_for(lambda: Job.objects.get(pk=job.pk).step >= 60, timeout=120, message="a checkpoint to be written")

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
