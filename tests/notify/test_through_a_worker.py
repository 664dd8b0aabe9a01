"""A job run by a real Celery worker fires its webhook when it succeeds."""
import pytest

from tests.conftest import wait_for
from trainhub.notify.models import NotificationDelivery

pytestmark = pytest.mark.slow


def test_the_webhook_fires_when_a_job_succeeds_on_a_worker(start_worker, cpu_pool, user_client, receiver):
    hook = receiver()
    worker = start_worker("cpu", extra_env={"TRAINHUB_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8"})  # the receiver
    spec = {"name": "tiny", "data": {"dataset": "synthetic", "samples": 64}, "train": {"epochs": 1},
            "notify": {"webhook": hook.url, "on": ["succeeded", "failed"]}}
    response = user_client.post("/api/jobs", spec, content_type="application/json")
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]

    wait_for(lambda: hook.requests, timeout=180, message=lambda: f"the webhook ({worker.output()[-2000:]})")
    body = hook.requests[0]["json"]
    assert (body["id"], body["status"], body["exit_code"], body["owner"]) == (job_id, "succeeded", 0, "alice")
    delivery = wait_for(lambda: NotificationDelivery.objects.filter(job_id=job_id, status="sent").first(),
                        timeout=30, message="the delivery to be recorded")
    assert delivery.attempts == 1 and delivery.target == hook.url
