"""A Slurm pool's settings: the user → account mapping, its validation, and what sbatch is given."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError

from trainhub.pools.models import WorkerPool
from workers.backends import RunRequest
from workers.backends.slurm import SlurmOptions, sbatch_argv

MAPPING = "# who = account\nalice = proj-a\n@vision = proj-vision\n"


@pytest.fixture
def pool(db):
    return WorkerPool(name="hpc", queue="hpc", kind="slurm", account="general", slurm_accounts=MAPPING)


def test_a_user_named_in_the_mapping_gets_their_account(pool, django_user_model):
    assert pool.slurm_account_for(django_user_model.objects.create_user("alice")) == "proj-a"


def test_a_member_of_a_mapped_group_gets_the_groups_account(pool, django_user_model):
    bob = django_user_model.objects.create_user("bob")
    bob.groups.add(Group.objects.create(name="vision"))
    assert pool.slurm_account_for(bob) == "proj-vision"


def test_anyone_else_gets_the_pools_default_account(pool, django_user_model):
    assert pool.slurm_account_for(django_user_model.objects.create_user("carol")) == "general"


def test_a_malformed_mapping_line_is_refused_by_field_and_line(pool):
    pool.slurm_accounts = "alice = proj-a\nbob proj-b\n"
    with pytest.raises(ValidationError) as err:
        pool.full_clean()
    assert "line 2" in str(err.value.message_dict["slurm_accounts"])


def test_a_slurm_pool_takes_gpu_jobs_and_runs_them_through_the_slurm_backend(pool):
    assert pool.has_gpus and pool.backend == "slurm"
    assert WorkerPool(kind="cpu").backend == "local"


def test_sbatch_gets_the_pools_partition_account_qos_and_the_jobs_resources():
    run = RunRequest(argv=["python"], env={}, cwd="/tmp", run_dir=Path("/tmp/run"), job_id=3, attempt=1)
    opts = SlurmOptions(partition="debug", account="proj-a", qos="high", nodes=2, procs_per_node=4,
                        gpus_per_node=2, time_minutes=30, job_name="my job; rm -rf /", grace_seconds=15)
    argv = sbatch_argv(run, opts, "/tmp/run/slurm-1.sh")
    assert argv[:2] == ["sbatch", "--parsable"] and argv[-1] == "/tmp/run/slurm-1.sh"
    for word in ("--job-name=my_job__rm_-rf__", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=4", "--time=30",
                 "--signal=TERM@25", "--no-requeue", "--gpus-per-node=2", "--partition=debug", "--account=proj-a", "--qos=high"):
        assert word in argv
