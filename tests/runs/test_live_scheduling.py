"""Scheduling on real Celery workers and real Redis: routing, priorities, slots, drain, GPU leases, offline."""
import json
import os
import signal
import textwrap
import time
from pathlib import Path

import pytest
from django.db import close_old_connections

from tests.conftest import wait_for
from trainhub.runs.lifecycle import jobs_reconcile
from trainhub.jobs.models import Job, JobEvent
from trainhub.jobs.services import job_cancel, job_submit
from trainhub.pools.models import Worker, WorkerPool, Workspace
from trainhub.runs.models import GpuLease

pytestmark = pytest.mark.slow
RECORD = textwrap.dedent("""
    import json, os, sys, time
    start = time.time()
    time.sleep(float(sys.argv[1]))
    # into its own run directory: a sandboxed job can write nowhere else
    with open(os.path.join(os.environ["TRAINHUB_RUN_DIR"], "record.json"), "w") as f:
        json.dump({"cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": start, "end": time.time()}, f)
""")


@pytest.fixture
def sleeper(tmp_path, transactional_db):
    """A workspace whose script sleeps and records when it ran and which GPUs it saw."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "record.py").write_text(RECORD)
    Workspace.objects.create(name="sleeper", path=str(code))

    def spec(seconds=1.0, **extra):
        return {"name": "sleep", "mode": "script", "script": {"workspace": "sleeper", "entry": "record.py",
                                                             "args": [str(seconds)]}, **extra}

    return spec


def records() -> dict[int, dict]:
    """What each job's record.py wrote into its run directory, by job id."""
    from django.conf import settings

    runs = Path(settings.TRAINHUB_RUNS_DIR)
    return {int(p.parent.name.split("-")[1]): json.loads(p.read_text()) for p in runs.glob("job-*/record.json")}


def finished(*jobs, timeout=90):
    ids = [j.pk for j in jobs]
    return wait_for(lambda: Job.objects.filter(pk__in=ids, status__in=["succeeded", "failed", "cancelled"]).count()
                    == len(ids), timeout=timeout, message=f"jobs {ids} to finish")


def online(hostname, timeout=60):
    return wait_for(lambda: Worker.objects.filter(hostname=hostname).first(), timeout=timeout,
                    message=f"{hostname} to register")


def test_jobs_run_on_their_own_pool_highest_priority_first(start_worker, cpu_pool, user, sleeper):
    WorkerPool.objects.create(name="other", queue="other")
    start_worker("cpu", slots=1, name="cpu1@test")
    start_worker("other", slots=1, name="other1@test")
    online("cpu1@test"), online("other1@test")
    blocker = job_submit(owner=user, data=sleeper(5))  # running until the three below are all queued
    wait_for(lambda: Job.objects.get(pk=blocker.pk).status == "running", message="the blocker to start")
    low = job_submit(owner=user, data=sleeper(0.1, priority=0))
    mid = job_submit(owner=user, data=sleeper(0.1, priority=0))
    high = job_submit(owner=user, data=sleeper(0.1, priority=10))
    elsewhere = job_submit(owner=user, data=sleeper(0.1, pool="other"))
    finished(blocker, low, mid, high, elsewhere)
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=[blocker.pk, low.pk, mid.pk, high.pk, elsewhere.pk])}
    assert all(j.status == "succeeded" for j in jobs.values()), [(j.pk, j.error) for j in jobs.values()]
    assert jobs[elsewhere.pk].worker.hostname == "other1@test"
    assert {jobs[j.pk].worker.hostname for j in (blocker, low, mid, high)} == {"cpu1@test"}
    starts = sorted((jobs[j.pk].started_at, j.pk) for j in (low, mid, high))
    assert [pk for _, pk in starts] == [high.pk, low.pk, mid.pk]


def test_slots_change_without_restart_and_a_drained_pool_finishes_running_jobs_but_starts_none(
        start_worker, cpu_pool, user, sleeper):
    start_worker("cpu", slots=3, name="cpu1@test")  # can run 3 at once; the pool allows 1
    online("cpu1@test")
    # the first runs 15 s: still running once the second has waited, the slots changed and it started
    first, second = job_submit(owner=user, data=sleeper(15)), job_submit(owner=user, data=sleeper(2))
    wait_for(lambda: Job.objects.get(pk=first.pk).status == "running", message="the first job to start")
    time.sleep(1.5)
    assert Job.objects.get(pk=second.pk).status == "queued"  # one slot: the second waits
    WorkerPool.objects.filter(pk=cpu_pool.pk).update(slots_per_worker=2)  # what the admin saves
    wait_for(lambda: Job.objects.get(pk=second.pk).status == "running", timeout=10,
             message="the second job to start in the new slot")
    assert Job.objects.get(pk=first.pk).status == "running"  # really side by side

    cpu_pool.refresh_from_db()
    cpu_pool.state = "draining"
    cpu_pool.save()
    third = job_submit(owner=user, data=sleeper(0.1))  # a draining pool still queues
    finished(first, second)
    time.sleep(2)
    assert Job.objects.get(pk=third.pk).status == "queued"
    assert Job.objects.get(pk=first.pk).status == "succeeded"
    cpu_pool.state = "enabled"
    cpu_pool.save()
    finished(third, timeout=30)
    assert Job.objects.get(pk=third.pk).status == "succeeded"


def test_concurrent_gpu_jobs_never_share_a_gpu(start_worker, user, sleeper):
    WorkerPool.objects.create(name="gpu", kind="gpu", queue="gpu", slots_per_worker=4)
    for name in ("g1@test", "g2@test"):
        start_worker("gpu", slots=4, name=name, extra_env={"TRAINHUB_FAKE_GPUS": "3"})
    workers = [online("g1@test"), online("g2@test")]
    assert [w.gpu_count for w in workers] == [3, 3] and workers[0].info["cpus"] and workers[0].info["memory_gb"]
    assert "torch" in workers[0].info and len(workers[0].info["gpus"]) == 3
    jobs = [job_submit(owner=user, data=sleeper(0.7, pool="gpu", resources={"gpus_per_node": 1 + i % 2}))
            for i in range(12)]
    peak = 0
    deadline = time.monotonic() + 120
    while Job.objects.filter(pk__in=[j.pk for j in jobs], status__in=["queued", "running"]).exists():
        held = list(GpuLease.objects.values_list("worker_id", "index"))
        assert len(held) == len(set(held))
        assert all(index < 3 for _, index in held)
        peak = max(peak, len(held))
        assert time.monotonic() < deadline, "the GPU jobs did not finish"
        time.sleep(0.05)
    done = Job.objects.filter(pk__in=[j.pk for j in jobs])
    assert {j.status for j in done} == {"succeeded"}, [(j.pk, j.error) for j in done]
    assert not GpuLease.objects.exists()  # every lease was given back
    runs = records()
    by_gpu: dict[tuple, list] = {}
    for job in done:
        seen = runs[job.pk]["cuda"].split(",")
        assert len(seen) == job.spec["resources"]["gpus_per_node"]
        for index in seen:
            by_gpu.setdefault((job.worker_id, index), []).append((runs[job.pk]["start"], runs[job.pk]["end"]))
    for intervals in by_gpu.values():  # one GPU, one job at a time
        intervals.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(intervals, intervals[1:]))
    assert peak >= 4  # both workers ran GPU jobs side by side
    assert {j.worker.hostname for j in done} == {"g1@test", "g2@test"}

    # a cancelled job gives its GPUs back too
    long = job_submit(owner=user, data=sleeper(60, pool="gpu", resources={"gpus_per_node": 3}))
    wait_for(lambda: GpuLease.objects.filter(job=long).count() == 3, message="the long job to hold 3 GPUs")
    job_cancel(Job.objects.get(pk=long.pk), actor=user)
    wait_for(lambda: Job.objects.get(pk=long.pk).status == "cancelled", timeout=30, message="the cancel")
    wait_for(lambda: not GpuLease.objects.exists(), timeout=10, message="the cancelled job's GPUs to be free")


def test_a_worker_whose_heartbeats_stop_is_shown_offline_and_its_job_recovered(start_worker, cpu_pool, user,
                                                                              sleeper, settings):
    settings.TRAINHUB_OFFLINE_SECONDS = 3
    worker = start_worker("cpu", name="doomed@test", extra_env={
        "TRAINHUB_HEARTBEAT_SECONDS": "1", "TRAINHUB_LEASE_SECONDS": "5", "TRAINHUB_GUARD_GRACE_SECONDS": "1"})
    online("doomed@test")
    job = job_submit(owner=user, data=sleeper(30))
    wait_for(lambda: Job.objects.get(pk=job.pk).status == "running", message="the job to start")
    assert Worker.objects.get(hostname="doomed@test").online
    os.killpg(worker.proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: not Worker.objects.get(hostname="doomed@test").online, timeout=10, message="offline")
    assert time.monotonic() - killed < 5

    def recovered():
        close_old_connections()
        jobs_reconcile()  # what every live worker's heartbeat runs
        return Job.objects.get(pk=job.pk).status == "queued"  # interrupted: back to the queue

    wait_for(recovered, timeout=20, interval=0.5, message="the lost job to be recovered")
    assert "interrupted: worker lost" in JobEvent.objects.filter(job=job).last().reason
