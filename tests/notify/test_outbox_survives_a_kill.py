"""A delivery survives the death of the process delivering it: a real Celery worker runs a job, its
webhook fails, the worker is SIGKILLed, and the worker started after it delivers the webhook."""
import signal
import threading
import time

import pytest

from django.utils import timezone

from tests.conftest import wait_for
from trainhub.notify.models import NotificationDelivery
from trainhub.notify.pool import POOL

pytestmark = pytest.mark.slow

ENV = {"TRAINHUB_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",  # the receiver is on 127.0.0.1
       "TRAINHUB_NOTIFY_BACKOFF_SECONDS": "3", "TRAINHUB_NOTIFY_POLL_SECONDS": "0.5"}
SPEC = {"name": "tiny", "data": {"dataset": "synthetic", "samples": 64}, "train": {"epochs": 1}}


def _submit(user_client, hook) -> int:
    spec = {**SPEC, "notify": {"webhook": hook.url, "on": ["succeeded"]}}
    response = user_client.post("/api/jobs", spec, content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _state(job_id: int, hook, worker) -> str:
    """What a timed-out wait saw: the job, its outbox rows, the receiver's requests, the worker's log."""
    from trainhub.jobs.models import Job
    job = Job.objects.filter(pk=job_id).values("status", "attempt", "error").first()
    rows = list(NotificationDelivery.objects.filter(job_id=job_id).values(
        "status", "attempts", "claimed_until", "next_attempt_at", "result"))
    codes = [r["code"] for r in hook.requests]
    mine = [t.name for t in threading.enumerate() if t.name.startswith("notify-")]  # this process's pollers
    return (f"job {job}, deliveries {rows}, receiver answered {codes}, delivery threads in the test process {mine}; "
            f"worker: {worker.output()[-2000:]}")


def _kill(worker) -> None:
    worker.stop(sig=signal.SIGKILL)
    assert worker.proc.returncode == -signal.SIGKILL


def test_a_webhook_waiting_for_its_retry_when_the_worker_is_killed_is_delivered_once_after_a_restart(
        start_worker, cpu_pool, user_client, receiver):
    hook = receiver([500, 500])  # fails twice, then takes it
    # a long wait before the second try, so the kill surely lands in it (3 s left a loaded machine
    # little room); once the worker is dead the row is made due, as if the wait had passed
    worker = start_worker("cpu", extra_env={**ENV, "TRAINHUB_NOTIFY_BACKOFF_SECONDS": "600"})
    job_id = _submit(user_client, hook)
    waiting = wait_for(lambda: NotificationDelivery.objects.filter(job_id=job_id, attempts=1, status="pending",
                                                                    claimed_until=None).first(),
                       timeout=180, message=lambda: f"the first failed try ({_state(job_id, hook, worker)})")
    assert not POOL.running  # the worker is the only process delivering: this test's own process is not

    _kill(worker)  # during the wait before the second try
    NotificationDelivery.objects.filter(pk=waiting.pk).update(next_attempt_at=timezone.now())
    time.sleep(5)
    assert len(hook.requests) == 1  # nothing else sends it while no worker runs, due as it is
    assert NotificationDelivery.objects.get(pk=waiting.pk).status == "pending"

    restarted = start_worker("cpu", extra_env=ENV)
    wait_for(lambda: NotificationDelivery.objects.filter(pk=waiting.pk, status="sent").exists(), timeout=120,
             message=lambda: f"the delivery after the restart ({_state(job_id, hook, restarted)})")
    time.sleep(3)  # long enough for a duplicate to show up, were there one

    assert [r["code"] for r in hook.requests] == [500, 500, 200]  # delivered exactly once
    assert {r["headers"]["X-TrainHub-Delivery"] for r in hook.requests} == {str(waiting.pk)}
    assert {r["json"]["delivery_id"] for r in hook.requests} == {waiting.pk}
    assert {(r["json"]["id"], r["json"]["status"]) for r in hook.requests} == {(job_id, "succeeded")}
    delivery = NotificationDelivery.objects.get(pk=waiting.pk)
    assert (delivery.attempts, delivery.result) == (3, "delivered (HTTP 200)")


def test_a_webhook_whose_worker_is_killed_mid_request_is_sent_again_with_the_same_idempotency_key(
        start_worker, cpu_pool, user_client, receiver):
    """At least once: the receiver got the first request, but its answer was never recorded."""
    hook = receiver(hold=True)  # no answer until the worker is dead
    env = {**ENV, "TRAINHUB_NOTIFY_CLAIM_SECONDS": "4"}  # a try holds its row for 4 s
    worker = start_worker("cpu", extra_env=env)
    job_id = _submit(user_client, hook)
    wait_for(lambda: hook.requests, timeout=180, message=lambda: f"the first request ({_state(job_id, hook, worker)})")

    _kill(worker)  # while the receiver is still answering
    hook.release.set()
    delivery = NotificationDelivery.objects.get(job_id=job_id)
    assert (delivery.status, delivery.attempts) == ("pending", 1) and delivery.claimed_until is not None

    restarted = start_worker("cpu", extra_env=env)  # takes the row over once its claim ran out
    wait_for(lambda: NotificationDelivery.objects.filter(pk=delivery.pk, status="sent").exists(), timeout=120,
             message=lambda: f"the delivery after the restart ({_state(job_id, hook, restarted)})")
    time.sleep(3)

    assert len(hook.requests) == 2
    assert [r["headers"]["X-TrainHub-Delivery"] for r in hook.requests] == [str(delivery.pk)] * 2
    assert [r["json"]["delivery_id"] for r in hook.requests] == [delivery.pk] * 2  # the receiver drops one
    assert NotificationDelivery.objects.get(pk=delivery.pk).attempts == 2
