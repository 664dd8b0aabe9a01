"""What Slurm does to a job reaches its TrainHub status, through a real worker on the real
cluster: its time limit, a node going down under it, an operator's scancel."""
from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from tests.conftest import wait_for
from tests.slurm.conftest import operator_cancel_reason
from tests.slurm.test_jobs import (LONG, final, leftovers, log_text, slurm_pool, slurm_worker,  # noqa: F401 (fixtures)
                                   submit)
from trainhub.jobs.models import Job, JobEvent, LogLine
from trainhub.runs.models import SlurmRun

pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]


def slurm_job_of(job_id: int) -> str:
    wait_for(lambda: "running as slurm job" in log_text(job_id), timeout=120, message="the job to run")
    return SlurmRun.objects.get(job_id=job_id).slurm_job_id


def test_a_job_stopped_at_its_time_limit_fails_with_time_limit(slurm_worker, user_client):  # noqa: F811
    job_id = submit(user_client, {**LONG, "timeout_minutes": 1})
    slurm_job_of(job_id)
    job = wait_for(lambda: final(job_id), timeout=200, message="Slurm's time limit")
    assert job.status == "failed" and job.error.startswith("time limit"), (job.error, log_text(job_id)[-2000:])


def test_a_node_taken_down_mid_job_fails_the_job_naming_the_node_and_leaves_no_process(
        slurm_worker, user_client, slurm_cluster_handle, live_settings):  # noqa: F811
    cluster = slurm_cluster_handle
    job_id = submit(user_client, {**LONG, "mode": "ddp", "resources": {"nodes": 2, "procs_per_node": 1}})
    slurm_id = slurm_job_of(job_id)
    wait_for(lambda: {0, 1} <= set(LogLine.objects.filter(job_id=job_id).values_list("rank", flat=True)),
             timeout=120, message="both nodes' ranks to train")
    try:
        cluster.run("scontrol", "update", "nodename=n2", "state=down", "reason=disk on fire")
        job = wait_for(lambda: final(job_id), timeout=120, message="the node failure to be noticed")
    finally:
        cluster.run("scontrol", "update", "nodename=n2", "state=resume", check=False)
        wait_for(lambda: cluster.node_states().get("n2") == "idle", timeout=60, message="n2 back")
    # Slurm (the job is submitted --no-requeue) ends it NODE_FAIL on every node; max_restarts is 0
    assert job.status == "failed", (job.error, log_text(job_id)[-2000:])
    assert job.error.startswith("node failure: n2 (disk on fire) went down"), job.error
    assert JobEvent.objects.filter(job_id=job_id, new="failed", reason=job.error).exists()
    # both "nodes" are this host: nothing of the job runs on either, launchers and step daemons included
    steps = lambda: [" ".join(p.info["cmdline"] or []) for p in cluster.step_daemons()  # noqa: E731
                     if f"[{slurm_id}." in " ".join(p.info["cmdline"] or [])]
    wait_for(lambda: not leftovers(live_settings, job_id) and not steps(), timeout=30,
             message=f"the job's processes to end: {leftovers(live_settings, job_id)} {steps()}")


def test_an_operators_scancel_fails_the_job_and_is_in_its_history(slurm_worker, user_client,  # noqa: F811
                                                                  slurm_cluster_handle):
    job_id = submit(user_client, LONG)
    slurm_cluster_handle.run("scancel", slurm_job_of(job_id))  # as root, from outside TrainHub
    job = wait_for(lambda: final(job_id), timeout=90, message="the scancel to be noticed")
    said = operator_cancel_reason(slurm_cluster_handle)  # "cancelled in Slurm by root, …" (sacct says who)
    assert job.status == "failed" and job.error == said, job.error
    event = JobEvent.objects.get(job_id=job_id, new="failed")
    assert event.reason == said and event.old == "running"


def test_a_preempted_job_is_retried_and_resumes_from_its_checkpoint(slurm_worker, user_client,  # noqa: F811
                                                                     slurm_cluster_handle, tmp_path, live_settings):
    cluster = slurm_cluster_handle
    spec = {"name": "preempted", "pool": "hpc", "data": {"dataset": "synthetic", "samples": 20000, "batch_size": 64},
            "train": {"epochs": 2}, "checkpoint": {"every_steps": 20, "keep_last": 2}, "max_restarts": 1}
    job_id = submit(user_client, spec)
    slurm_job_of(job_id)
    checkpoints = Path(live_settings.TRAINHUB_RUNS_DIR) / f"job-{job_id}" / "checkpoints"
    wait_for(lambda: any(checkpoints.glob("step-*")), timeout=180, message="a checkpoint")
    # Its training paused (SIGSTOP), so it cannot finish before Slurm preempts it: the job takes a few
    # seconds, and an idle machine once trained it to the end before the urgent job was scheduled
    training = [p for p in psutil.process_iter(["cmdline"])
                if f"{live_settings.TRAINHUB_RUNS_DIR}/job-{job_id}/job.yaml" in (p.info["cmdline"] or [])]
    assert training
    for proc in training:
        proc.suspend()
    (tmp_path / "urgent.sh").write_text("#!/bin/bash\nsleep 8\n")
    cluster.run("sbatch", "--parsable", "--partition=urgent", "--nodes=2", "--exclusive",
                f"--output={tmp_path}/urgent.out", str(tmp_path / "urgent.sh"))
    try:
        wait_for(lambda: JobEvent.objects.filter(job_id=job_id, new="queued", reason__contains="preempted").exists(),
                 timeout=90, message="the preemption to be noticed")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; job {Job.objects.get(pk=job_id).status}, slurm: "
                             f"{cluster.run('squeue', '-h', '-t', 'all', '-o', '%i %P %T %r %j')}\n"
                             f"{log_text(job_id)[-3000:]}") from None
    finally:
        for proc in training:  # preemption ends them (SIGCONT, SIGTERM, SIGKILL); any left are not held
            try:
                proc.resume()
            except psutil.NoSuchProcess:
                pass
    job = wait_for(lambda: final(job_id), timeout=400, message="the retried attempt to finish")
    assert job.status == "succeeded" and job.attempt == 2, (job.error, log_text(job_id)[-3000:])
    assert "resumed at step" in log_text(job_id)
