"""Multi-node jobs are gang-scheduled: N workers of the pool start it together (torchrun c10d), or none does."""
import re

import pytest

from tests.conftest import wait_for
from trainhub.jobs.logs import read_lines
from trainhub.jobs.models import Job, JobEvent
from trainhub.jobs.services import job_submit
from trainhub.pools.models import Worker
from trainhub.runs.models import GangMember, GpuLease

pytestmark = pytest.mark.slow
TWO_NODES = {"name": "gang", "mode": "ddp", "resources": {"nodes": 2, "procs_per_node": 1},
             "data": {"dataset": "iris"}, "model": {"name": "logreg"}, "train": {"epochs": 1}}
LOCAL = {"TRAINHUB_WORKER_ADDRESS": "127.0.0.1"}


def registered(*names):
    wait_for(lambda: Worker.objects.filter(hostname__in=names).count() == len(names), message=f"{names} to register")


def test_a_two_node_job_starts_on_two_workers_and_meets_through_c10d(start_worker, cpu_pool, user, live_settings):
    start_worker("cpu", slots=2, name="n1@test", extra_env=LOCAL)
    start_worker("cpu", slots=2, name="n2@test", extra_env=LOCAL)
    registered("n1@test", "n2@test")
    job = job_submit(owner=user, data=TWO_NODES)
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=150, message="the two-node job to finish")
    members = list(GangMember.objects.filter(job=job).select_related("worker"))
    assert done.status == "succeeded", (done.error, [m.worker.hostname for m in members])
    assert sorted(m.node_rank for m in members) == [0, 1]
    assert {m.worker.hostname for m in members} == {"n1@test", "n2@test"}
    wait_for(lambda: not GangMember.objects.filter(done=False).exists(), timeout=10, message="both places released")
    assert not GpuLease.objects.exists()
    leader = next(m for m in members if m.node_rank == 0)
    assert done.worker_id == leader.worker_id
    lines = read_lines(job.pk, limit=10000)
    log = "\n".join(line.text for line in lines)
    assert "--nnodes 2" in log and "--rdzv-backend c10d" in log
    node1 = (live_settings.TRAINHUB_RUNS_DIR / f"job-{job.pk}" / "logs" / "node1.out").read_text()
    # node 0 runs global rank 0, the other node rank 1; both are in the job's log, each line once
    assert set(re.findall(r"\[rank(\d+)\]", node1)) == {"1"}
    assert {line.rank for line in lines if line.stream != "s"} == {0, 1}
    rank1 = [line.text for line in lines if line.rank == 1 and line.stream != "s"]
    assert any("epoch" in text for text in rank1), rank1[-5:]
    assert len(rank1) == len(node1.splitlines())
    assert [line.seq for line in lines] == list(range(len(lines)))  # gap-free, no duplicates


def test_a_gang_that_cannot_gather_fails_after_the_timeout_and_holds_nothing(start_worker, cpu_pool, user):
    start_worker("cpu", slots=1, name="alone@test", extra_env={**LOCAL, "TRAINHUB_GANG_TIMEOUT_SECONDS": "3"})
    registered("alone@test")
    job = job_submit(owner=user, data=TWO_NODES)
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status="failed").first(), timeout=30,
                    message="the gang to time out")
    assert "gang timeout: only 1 of 2 workers" in done.error
    assert not JobEvent.objects.filter(job=job, new="running").exists()  # no half-started job
    assert not read_lines(job.pk, limit=10)  # no process was launched
    # its slot is free again: a one-node job runs on the same one-slot worker
    wait_for(lambda: not GangMember.objects.filter(done=False).exists(), timeout=10, message="the place released")
    single = job_submit(owner=user, data={**TWO_NODES, "mode": "centralized", "resources": {"nodes": 1}})
    assert wait_for(lambda: Job.objects.filter(pk=single.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=60, message="a normal job").status == "succeeded"
