"""A webhook's answer arrives while the delivering worker is cut off from PostgreSQL: a real Celery worker
reaches its database through a TCP proxy, the receiver holds its answer while the proxy cuts every
connection, then answers 200. The worker must record that answer once the database is back, while the
row is still its own, and not send the message a second time once its claim runs out."""
import time

import pytest
from django.db import connection

from tests.conftest import wait_for
from tests.faults.helpers import through
from trainhub.notify.models import NotificationDelivery

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(connection.vendor != "postgresql",
                                 reason="cuts TCP connections to PostgreSQL (set DATABASE_URL=postgres://...)")]

#: how long a try holds its row; the old code sent the message again once it ran out
CLAIM_SECONDS = 60
OUTAGE_SECONDS = 6


def test_an_answer_that_comes_while_the_database_is_cut_off_is_recorded_once_it_is_back_and_not_sent_again(
        proxy, start_worker, cpu_pool, user_client, receiver):
    hook = receiver(hold=True)  # no answer until the database is cut off
    worker = start_worker("cpu", extra_env={
        "DATABASE_URL": through(proxy), "TRAINHUB_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
        "TRAINHUB_NOTIFY_CLAIM_SECONDS": str(CLAIM_SECONDS), "TRAINHUB_NOTIFY_POLL_SECONDS": "0.5"})
    spec = {"name": "tiny", "data": {"dataset": "synthetic", "samples": 64}, "train": {"epochs": 1},
            "notify": {"webhook": hook.url, "on": ["succeeded"]}}
    response = user_client.post("/api/jobs", spec, content_type="application/json")
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    wait_for(lambda: hook.requests, timeout=180, message=lambda: f"the webhook's request; worker: {worker.output()[-2000:]}")
    delivery = NotificationDelivery.objects.get(job_id=job_id)
    assert (delivery.status, delivery.attempts) == ("pending", 1) and delivery.claimed_until is not None

    cut = proxy.down()  # the worker's connections go, and new ones are turned away
    hook.release.set()  # the receiver answers 200 now, into the outage
    time.sleep(OUTAGE_SECONDS)
    turned_away = proxy.turned_away
    proxy.up()
    outage_ended = time.monotonic()

    sent = wait_for(lambda: NotificationDelivery.objects.filter(pk=delivery.pk, status="sent").first(),
                    timeout=CLAIM_SECONDS - OUTAGE_SECONDS - 10,
                    message=lambda: f"the answer to be recorded; worker: {worker.output()[-3000:]}")
    recorded_after = time.monotonic() - outage_ended
    assert cut >= 1, "the worker held no database connection to cut"
    assert turned_away >= 2, "the worker did not try again during the outage"
    assert (sent.attempts, sent.http_status, sent.result, sent.claimed_until) == (1, 200, "delivered (HTTP 200)", None)
    assert recorded_after < 15, f"recorded {recorded_after:.0f} s after the database came back"
    assert f"delivery {delivery.pk}: could not record its answer (delivered (HTTP 200))" in worker.output()
    time.sleep(3)  # long enough for a second request to show up, were there one
    assert [r["code"] for r in hook.requests] == [200]
    assert worker.proc.poll() is None, "the worker died"
