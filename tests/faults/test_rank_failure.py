"""A rank of a multi-process job dies or hangs: the whole job ends, the failing rank's last words shown."""
import pytest

from tests.conftest import job_processes, wait_for
from trainhub.jobs.logs import read_lines
from trainhub.jobs.models import Job
from trainhub.pools.models import Workspace

pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]

SCRIPT = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} up", flush=True)
if rank == 1:
    if sys.argv[1] == "die":
        print("rank 1: out of memory (simulated), exiting", flush=True)
        sys.exit(3)
    time.sleep(3600)  # hang: never joins the collective
dist.all_reduce(torch.ones(1))  # rank 0 waits here for rank 1
print("rank 0 should never get here", flush=True)
"""


def run_failing_job(user_client, tmp_path, how, **extra):
    workspace = tmp_path / "team"
    workspace.mkdir(exist_ok=True)
    (workspace / "train.py").write_text(SCRIPT)
    Workspace.objects.get_or_create(name="team", defaults={"path": str(workspace)})
    spec = {"name": f"rank-{how}", "mode": "script", "resources": {"procs_per_node": 2},
            "script": {"workspace": "team", "entry": "train.py", "launcher": "torchrun", "args": [how]}, **extra}
    response = user_client.post("/api/jobs", spec, content_type="application/json")
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    job = wait_for(lambda: Job.objects.filter(pk=job_id, status__in=["succeeded", "failed"]).first(),
                   timeout=180, message=f"the job whose rank {how}s to end")
    leftovers = job_processes(job_id)
    return job, read_lines(job_id, limit=10000), leftovers


def test_a_rank_that_dies_ends_the_whole_job_and_its_last_lines_are_shown(start_worker, cpu_pool, user_client,
                                                                         tmp_path):
    start_worker("cpu")
    job, lines, leftovers = run_failing_job(user_client, tmp_path, "die")
    assert job.status == "failed" and job.exit_code != 0
    assert any(l.rank == 1 and "out of memory (simulated)" in l.text for l in lines)
    assert not any("should never get here" in l.text for l in lines)
    assert leftovers == []


def test_a_rank_that_hangs_is_stopped_by_the_watchdog(start_worker, cpu_pool, user_client, tmp_path):
    start_worker("cpu")
    job, lines, leftovers = run_failing_job(user_client, tmp_path, "hang", watchdog_minutes=0.25)
    assert job.status == "failed" and "watchdog" in job.error
    assert any(l.rank == 1 and "rank 1 up" in l.text for l in lines)
    assert leftovers == []
