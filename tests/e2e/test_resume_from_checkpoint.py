"""'Resume from here' on a checkpoint starts a new job that continues from that step."""
import pytest

from tests.conftest import wait_for
from trainhub.jobs.logs import read_lines
from trainhub.jobs.models import Job

pytestmark = pytest.mark.slow


def finished(job_id):
    return Job.objects.filter(pk=job_id, status__in=["succeeded", "failed", "cancelled"]).first()


def test_a_new_job_resumes_from_a_checkpoint_chosen_on_the_job_page(start_worker, cpu_pool, user_client):
    start_worker("cpu")
    spec = {"name": "base", "data": {"dataset": "iris", "batch_size": 16}, "model": {"name": "mlp"},
            "train": {"epochs": 4}, "checkpoint": {"every_steps": 8, "keep_last": 10}}
    first = user_client.post("/api/jobs", spec, content_type="application/json").json()["id"]
    assert wait_for(lambda: finished(first), timeout=120, message="the first job").status == "succeeded"
    page = user_client.get(f"/jobs/{first}").content.decode()
    assert "step-8" in page and "Resume from here" in page

    response = user_client.post(f"/jobs/{first}/resume", {"checkpoint": "step-8"})
    assert response.status_code == 302
    second = int(response["Location"].rsplit("/", 1)[1])
    job = wait_for(lambda: finished(second), timeout=120, message="the resumed job")
    assert job.status == "succeeded", job.error
    log = "\n".join(line.text for line in read_lines(second, limit=10000))
    assert f"starting from checkpoint job-{first}/checkpoints/step-8" in log
    assert "resum" in log.lower() and "step 8" in log.lower()


def test_resuming_from_a_missing_or_foreign_checkpoint_is_refused(user_client, cpu_pool, django_user_model,
                                                                  live_settings, client):
    job_id = user_client.post("/api/jobs", {"name": "x"}, content_type="application/json").json()["id"]
    assert user_client.post(f"/jobs/{job_id}/resume", {"checkpoint": "step-999"}).status_code == 404
    response = user_client.post("/api/jobs", {"name": "y", "checkpoint": {"start_from": "job-999/checkpoints/step-1"}},
                                content_type="application/json")
    assert response.status_code == 422 and "checkpoint.start_from" in response.json()["errors"]
    response = user_client.post("/api/jobs", {"name": "z", "checkpoint": {"start_from": "job-1/../../etc"}},
                                content_type="application/json")
    assert response.status_code == 422
