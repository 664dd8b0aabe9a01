"""A job submitted through the web form runs on a real Celery worker and succeeds."""
import pytest

from tests.conftest import job_processes, wait_for
from trainhub.jobs.models import Job, JobEvent, LogLine, Metric

pytestmark = pytest.mark.slow

FORM = {"name": "digits-mlp", "mode": "centralized", "pool": "cpu", "dataset": "digits", "model": "mlp",
        "epochs": 2, "lr": 0.003, "optimizer": "adamw", "batch_size": 64, "seed": 0, "nodes": 1,
        "procs_per_node": 1, "gpus_per_node": 0, "priority": 0, "spec_yaml": ""}


def final(job_id):
    job = Job.objects.get(pk=job_id)
    return job if job.status in ("succeeded", "failed", "cancelled") else None


def test_a_job_submitted_in_the_browser_form_runs_on_a_worker_and_succeeds(start_worker, cpu_pool, user_client):
    worker = start_worker("cpu")
    response = user_client.post("/jobs/new", FORM)
    assert response.status_code == 302
    job_id = int(response["Location"].rsplit("/", 1)[1])

    job = wait_for(lambda: final(job_id), timeout=180, message="the job to finish")
    assert job.status == "succeeded", (job.error, worker.output()[-3000:])
    assert job.exit_code == 0
    assert list(JobEvent.objects.filter(job=job).values_list("new", flat=True)) == ["queued", "running", "succeeded"]
    text = "\n".join(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))
    assert "epoch 2/2" in text and "val_acc" in text
    seqs = list(LogLine.objects.filter(job=job).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(len(seqs)))  # gap-free, duplicate-free
    assert Metric.objects.filter(job=job, name="loss").exists() or Metric.objects.filter(job=job).exists()
    assert job.total_steps and job.step == job.total_steps

    page = user_client.get(f"/jobs/{job_id}")
    assert b"succeeded" in page.content and b"epoch 2/2" in page.content
    assert b"model.pt" in page.content and b"checkpoints/step-" in page.content  # files listed for download
    download = user_client.get(f"/api/jobs/{job_id}/files/model.pt")
    assert download.status_code == 200 and len(b"".join(download.streaming_content)) > 1000


def test_cancelling_a_running_job_stops_its_processes(start_worker, cpu_pool, user_client):

    start_worker("cpu")
    spec = {"name": "long", "data": {"dataset": "synthetic", "samples": 100000}, "train": {"epochs": 50}}
    response = user_client.post("/api/jobs", spec, content_type="application/json")
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    wait_for(lambda: Job.objects.get(pk=job_id).log_lines > 1, timeout=120, message="the job to print")

    assert user_client.post(f"/jobs/{job_id}/cancel").status_code == 302
    job = wait_for(lambda: final(job_id), timeout=60, message="the cancel to finish")
    assert job.status == "cancelled"
    leftovers = job_processes(job_id)
    assert leftovers == []
