"""Jobs of a Slurm pool through a real TrainHub worker on the real two-node cluster."""
from __future__ import annotations

import os
import subprocess

import psutil
import pytest
from django.utils.html import escape

from tests.cli.conftest import token, trainhub, web_server  # noqa: F401 (fixtures: the CLI against a live server)
from tests.conftest import wait_for
from trainhub.jobs.models import Job, LogLine

pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]
CLASSIFY = {"name": "digits on slurm", "pool": "hpc", "data": {"dataset": "digits", "batch_size": 64},
            "model": {"name": "mlp"}, "train": {"epochs": 1}}
LONG = {"name": "long", "pool": "hpc", "data": {"dataset": "synthetic", "samples": 100000}, "train": {"epochs": 50}}


@pytest.fixture
def slurm_pool(db, slurm_cluster):
    from trainhub.pools.models import WorkerPool

    return WorkerPool.objects.create(name="hpc", queue="hpc", kind="slurm", slurm_conf=slurm_cluster,
                                     partition="debug", slots_per_worker=4)


@pytest.fixture
def slurm_worker(start_worker, slurm_pool, slurm_cluster):
    return start_worker("hpc", slots=4, extra_env={"SLURM_CONF": slurm_cluster})


def submit(client, spec: dict) -> int:
    response = client.post("/api/jobs", spec, content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def final(job_id: int) -> Job | None:
    job = Job.objects.get(pk=job_id)
    return job if job.status in ("succeeded", "failed", "cancelled") else None


def log_text(job_id: int) -> str:
    return "\n".join(LogLine.objects.filter(job_id=job_id).order_by("seq").values_list("text", flat=True))


def test_a_classify_job_runs_as_a_slurm_job_and_its_log_is_stored(slurm_worker, user_client):
    job_id = submit(user_client, CLASSIFY)
    job = wait_for(lambda: final(job_id), timeout=240, message="the Slurm job to finish")
    assert job.status == "succeeded", (job.error, log_text(job_id)[-3000:], slurm_worker.output()[-3000:])
    text = log_text(job_id)
    assert "running as slurm job" in text and "epoch 1/1" in text
    seqs = list(LogLine.objects.filter(job_id=job_id).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(len(seqs)))


def test_a_two_node_ddp_job_runs_across_both_nodes(slurm_worker, user_client):
    spec = {**CLASSIFY, "name": "ddp on slurm", "mode": "ddp", "resources": {"nodes": 2, "procs_per_node": 1}}
    job_id = submit(user_client, spec)
    job = wait_for(lambda: final(job_id), timeout=300, message="the 2-node job to finish")
    text = log_text(job_id)
    assert job.status == "succeeded", (job.error, text[-3000:])
    assert "on n1,n2" in text
    ranks = set(LogLine.objects.filter(job_id=job_id).values_list("rank", flat=True))
    assert {0, 1} <= ranks


def test_a_pending_job_shows_slurms_reason_and_queue_place_then_runs_and_a_cancel_leaves_no_process(
        slurm_worker, user_client, slurm_cluster_handle, live_settings, tmp_path, trainhub):
    cluster = slurm_cluster_handle
    (tmp_path / "fill.sh").write_text("#!/bin/bash\nsleep 600\n")
    filler = cluster.run("sbatch", "--parsable", "--nodes=2", "--exclusive", f"--output={tmp_path}/fill.out",
                         str(tmp_path / "fill.sh")).strip()
    # running before ours is submitted: a job of the previous test may still be completing on a node,
    # and a filler still pending would stand first in the queue
    wait_for(lambda: cluster.run("squeue", "-h", "-j", filler, "-o", "%T").strip() == "RUNNING", timeout=60,
             message="the filler to run")
    job_id = submit(user_client, LONG)
    wait_for(lambda: "waiting in Slurm's queue" in log_text(job_id), timeout=60, message="Slurm's reason")
    assert "Resources" in log_text(job_id) or "Priority" in log_text(job_id)
    assert Job.objects.get(pk=job_id).status == "running"  # claimed; Slurm holds it
    other = submit(user_client, {**LONG, "name": "cancelled while pending"})  # behind it in Slurm's queue
    api = wait_for(lambda: (page := user_client.get(f"/api/jobs/{other}").json())["slurm_queue_position"] and page,
                   timeout=60, message="the second job's place in Slurm's queue")
    assert api["slurm_queue_position"] == 2 and api["slurm_pending_reason"] in ("Resources", "Priority")
    assert api["waiting_reason"] == f"pending in Slurm ({api['slurm_pending_reason']}), #2 in partition debug's queue"
    first = user_client.get(f"/api/jobs/{job_id}").json()
    reason = first["slurm_pending_reason"]
    shown = f"pending in Slurm ({reason}), #1 in partition debug's queue"
    assert first["waiting_reason"] == shown and first["slurm_queue_position"] == 1  # one reason; the alias kept
    assert f"<b>Waiting:</b> {escape(shown)}" in user_client.get(f"/jobs/{job_id}").content.decode()  # the job page
    assert escape(shown) in user_client.get("/").content.decode()  # the job list
    assert user_client.get(f"/api/jobs/{job_id}/logs").json()["waiting_reason"] == shown  # --follow reads it
    cli = trainhub("status", str(job_id))
    assert f"running ({shown})" in cli.stdout, cli.stdout + cli.stderr
    assert user_client.post(f"/api/jobs/{other}/cancel").status_code in (200, 202)  # cancelled while Slurm holds it
    assert wait_for(lambda: final(other), timeout=30, message="the pending cancel").status == "cancelled"
    assert cluster.run("squeue", "-h", "-n", f"trainhub-{other}-cancelled_while_pending").strip() == ""
    assert leftovers(live_settings, other) == []
    cluster.run("scancel", filler)
    wait_for(lambda: "running as slurm job" in log_text(job_id), timeout=60, message="the job to run")
    page = user_client.get(f"/api/jobs/{job_id}").json()
    assert (page["waiting_reason"], page["slurm_pending_reason"], page["slurm_queue_position"]) == ("", "", None)
    assert 'id="waiting-reason"' not in user_client.get(f"/jobs/{job_id}").content.decode()
    wait_for(lambda: "epoch" in log_text(job_id) or "step" in log_text(job_id), timeout=120, message="training")
    assert user_client.post(f"/api/jobs/{job_id}/cancel").status_code in (200, 202)
    assert wait_for(lambda: final(job_id), timeout=90, message="the cancel").status == "cancelled"
    assert leftovers(live_settings, job_id) == [], log_text(job_id)[-2000:]


def leftovers(live_settings, job_id: int) -> list[str]:
    run_dir = f"{live_settings.TRAINHUB_RUNS_DIR}/job-{job_id}/"  # not another test run's job of the same id
    return [" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])
            if run_dir in " ".join(p.info["cmdline"] or [])]


def test_a_slurm_job_cancelled_outside_trainhub_is_recorded(slurm_worker, user_client, slurm_cluster):
    job_id = submit(user_client, LONG)
    wait_for(lambda: "running as slurm job" in log_text(job_id), timeout=120, message="the job to run")
    slurm_id = log_text(job_id).split("running as slurm job ", 1)[1].split()[0]
    subprocess.run(["scancel", slurm_id], env={**os.environ, "SLURM_CONF": slurm_cluster}, check=True)
    job = wait_for(lambda: final(job_id), timeout=90, message="the scancel to be noticed")
    assert job.status == "failed" and "outside TrainHub" in job.error
