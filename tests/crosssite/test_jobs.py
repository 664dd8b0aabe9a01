"""A cross-site job through TrainHub: two pools on this machine, one real Celery worker each,
the job's lighthouse started by the leader; DiLoCo over the two sites (CPU, gloo)."""
from __future__ import annotations

import psutil
import pytest

from tests.conftest import wait_for
from tests.crosssite import sites
from trainhub.jobs.logs import read_lines
from trainhub.jobs.models import Job, Metric
from trainhub.jobs.services import job_submit
from trainhub.pools.models import Worker, WorkerPool
from trainhub.runs.models import GangMember

pytestmark = pytest.mark.slow
LOCAL = {"TRAINHUB_WORKER_ADDRESS": "127.0.0.1"}
POOLS = ("lab-a", "cloud-b")


def spec(**extra) -> dict:
    data = {"name": "two-sites", "mode": "ddp", "sites": [{"pool": p} for p in POOLS],
            "sync": {"algorithm": "diloco", "every": 10, "timeout_seconds": 30},
            "data": {"dataset": "digits", "batch_size": 32},
            "train": {"max_steps": 60, "epochs": 1000, "log_every_steps": 10}}
    data.update(extra)
    return data


@pytest.fixture
def two_pools(db):
    return [WorkerPool.objects.get_or_create(name=p, defaults={"kind": "cpu", "queue": p})[0] for p in POOLS]


@pytest.fixture
def site_workers(start_worker, two_pools):
    workers = [start_worker(p, slots=1, name=f"{p}@test", extra_env=LOCAL) for p in POOLS]
    wait_for(lambda: Worker.objects.filter(hostname__in=[f"{p}@test" for p in POOLS]).count() == 2,
             message="both sites' workers to register")
    return workers


def finished(job, timeout=300):
    return wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed", "cancelled"]).first(),
                    timeout=timeout, message=f"job {job.pk} to finish")


def lighthouses() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any("torchft_lighthouse" in part for part in proc.info["cmdline"] or []):
            found.append(proc)
    return found


def training_processes(job_id: int) -> list[psutil.Process]:
    """Runner processes of this job's sites (their --run-dir names the job's directories)."""
    return [p for p in psutil.process_iter(["cmdline"])
            if any(f"job-{job_id}" in part for part in p.info["cmdline"] or [])
            and "workers.runner" in " ".join(p.info["cmdline"] or [])]


def test_a_diloco_job_over_two_pools_trains_both_sites_to_identical_weights(site_workers, user, live_settings):
    job = job_submit(owner=user, data=spec())
    done = finished(job)
    assert done.status == "succeeded", done.error
    places = {m.node_rank: m.worker.hostname for m in GangMember.objects.filter(job=job).select_related("worker")}
    assert places == {0: "lab-a@test", 1: "cloud-b@test"}
    runs = live_settings.TRAINHUB_RUNS_DIR
    a = sites.final_weights(runs / f"job-{job.pk}", 60)
    b = sites.final_weights(runs / f"job-{job.pk}-site-cloud-b", 60)
    assert sites.same_weights(a, b)
    text = "\n".join(line.text for line in read_lines(job.pk, limit=100000))
    assert "[site lab-a]" in text and "[site cloud-b]" in text and "step 60/60" in text
    names = set(Metric.objects.filter(job=job).values_list("name", flat=True))
    assert {"sync_outer_step", "sync_participants", "sync_bytes", "sync_seconds", "val_acc"} <= names
    assert {"cloud-b/sync_outer_step", "cloud-b/val_acc"} <= names
    outer = Metric.objects.filter(job=job, name="sync_outer_step").order_by("step").values_list("value", flat=True)
    assert list(outer) == [1, 2, 3, 4, 5, 6]
    assert set(Metric.objects.filter(job=job, name="sync_participants").values_list("value", flat=True)) == {2}
    final = Metric.objects.filter(job=job, name="val_acc", step=60).get().value
    assert final > 0.7
    wait_for(lambda: not lighthouses(), timeout=15, message="the lighthouse to stop")
