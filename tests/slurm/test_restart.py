"""The TrainHub worker following a Slurm job dies mid-job: the Slurm job runs on, and the next
worker of the pool follows it again — the job ends as Slurm says, its log continuous."""
from __future__ import annotations

import os
import signal

import pytest

from tests.conftest import wait_for
from tests.slurm.test_jobs import final, slurm_pool, submit  # noqa: F401 (fixture)
from trainhub.jobs.models import Job, LogLine
from trainhub.pools.models import Workspace
from trainhub.runs.models import SlurmRun

pytestmark = pytest.mark.slow
LINES = 150
PRINTER = f"import time\nfor i in range({LINES}):\n    print(f'line {{i}}', flush=True)\n    time.sleep(0.1)\n"


def printed(job_id: int) -> list[str]:
    return list(LogLine.objects.filter(job_id=job_id, stream="o").order_by("seq").values_list("text", flat=True))


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["crash", "shutdown"])
def test_a_worker_stopped_mid_job_is_replaced_and_the_job_finishes_with_a_continuous_log(
        how, start_worker, slurm_pool, slurm_cluster, user_client, tmp_path):  # noqa: F811
    (tmp_path / "printer.py").write_text(PRINTER)
    Workspace.objects.create(name="printer", path=str(tmp_path))
    env = {"SLURM_CONF": slurm_cluster}
    first = start_worker("hpc", slots=2, extra_env=env)
    job_id = submit(user_client, {"name": "printer on slurm", "pool": "hpc", "mode": "script",
                                  "script": {"workspace": "printer", "entry": "printer.py"}})
    wait_for(lambda: len(printed(job_id)) >= 20, timeout=120, message="the job to print")
    slurm_job = SlurmRun.objects.get(job_id=job_id).slurm_job_id
    os.killpg(first.proc.pid, how)  # a crash, or a shutdown: the Slurm job is not the worker's child
    first.proc.wait(60)
    assert len(printed(job_id)) < LINES  # killed mid-job
    start_worker("hpc", slots=2, extra_env=env)  # the same node name (hpc@host): its restart
    job = wait_for(lambda: final(job_id), timeout=180, message="the adopted job to finish")
    system = list(LogLine.objects.filter(job_id=job_id, stream="s").values_list("text", flat=True))
    assert job.status == "succeeded", (job.error, system)
    assert job.attempt == 1  # followed again, not started again
    assert printed(job_id) == [f"line {i}" for i in range(LINES)]  # nothing lost, nothing twice
    seqs = list(LogLine.objects.filter(job_id=job_id).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(Job.objects.get(pk=job_id).log_lines))
    assert any(f"follows slurm job {slurm_job} again" in text for text in system), system
    if how == signal.SIGTERM:
        assert any("this worker shuts down; slurm job" in text for text in system), system


def test_a_lost_jobs_slurm_job_that_slurm_no_longer_knows_fails_with_that_reason(
        start_worker, slurm_pool, slurm_cluster, user, monkeypatch):  # noqa: F811
    from datetime import timedelta

    from django.utils import timezone

    from trainhub.jobs.services import job_submit

    monkeypatch.setattr("trainhub.jobs.services.job_enqueue", lambda job: None)  # its worker "died" after the claim
    job = job_submit(owner=user, data={"name": "lost", "pool": "hpc", "train": {"epochs": 1}})
    assert job.transition("running", reason="claimed by a worker that then died", lease_token=1,
                          lease_expires_at=timezone.now() - timedelta(seconds=60))
    SlurmRun.objects.create(job=job, attempt=job.attempt, slurm_job_id="987654", stream_token=1)  # long forgotten
    start_worker("hpc", extra_env={"SLURM_CONF": slurm_cluster})  # its heartbeat's reconcile finds the lease expired
    job = wait_for(lambda: final(job.pk), timeout=90, message="the lost job to be adopted and found gone")
    assert job.status == "failed" and job.error.startswith("lost: Slurm no longer knows the job"), job.error
    assert job.attempt == 1


def test_a_slurm_job_an_earlier_attempt_left_unrecorded_is_cancelled_before_the_next_attempt_submits(
        start_worker, slurm_pool, slurm_cluster, slurm_cluster_handle, user_client, tmp_path):  # noqa: F811
    from workers.slurm_execution import owner_tag

    (tmp_path / "printer.py").write_text(PRINTER.replace(str(LINES), "5"))
    Workspace.objects.create(name="printer", path=str(tmp_path))
    job_id = submit(user_client, {"name": "printer on slurm", "pool": "hpc", "mode": "script",
                                  "script": {"workspace": "printer", "entry": "printer.py"}})
    name, owner = f"trainhub-{job_id}-printer_on_slurm", owner_tag(Job.objects.get(pk=job_id))

    def sbatch(comment: str) -> str:
        return slurm_cluster_handle.run("sbatch", "--parsable", f"--job-name={name}", f"--comment={comment}",
                                        "--partition=debug", f"--output={tmp_path}/orphan-%j.out",
                                        "--wrap=sleep 600").strip().split(";")[0]

    # what a worker lost right after sbatch answered leaves: a Slurm job of this job's name and
    # deployment, of an earlier attempt, that no SlurmRun row records
    orphan = sbatch(f"{owner} attempt 0")
    # the same name from another TrainHub sharing the Slurm account: not ours to cancel
    stranger = sbatch(f"trainhub 0123456789ab job {job_id} attempt 0")
    start_worker("hpc", slots=2, extra_env={"SLURM_CONF": slurm_cluster})
    job = wait_for(lambda: final(job_id), timeout=180, message="the job to finish")
    system = list(LogLine.objects.filter(job_id=job_id, stream="s").values_list("text", flat=True))
    assert job.status == "succeeded", (job.error, system)
    assert any(f"cancelled slurm job(s) {orphan} that an earlier attempt left running" in t for t in system), system
    queued = slurm_cluster_handle.run("squeue", "-h", "-o", "%i").split()
    assert orphan not in queued and stranger in queued
