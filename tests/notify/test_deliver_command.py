"""``manage.py deliver_notifications`` delivers what is waiting in the outbox, for hosts without a worker."""
import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import ROOT, database_url, wait_for
from trainhub.notify.models import NotificationDelivery
from trainhub.notify.outbox import payload

pytestmark = pytest.mark.slow


def test_the_command_delivers_a_row_left_pending_and_stops_on_sigterm(running_job, receiver, tmp_path):
    hook = receiver()
    job = running_job(status="failed")
    row = NotificationDelivery.objects.create(job=job, channel="webhook", target=hook.url, event="failed",
                                              attempts=2, payload=payload(job))  # a stopped process's retry
    env = {**os.environ, "DATABASE_URL": database_url(), "TRAINHUB_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.1"}
    log = tmp_path / "deliver.log"
    proc = subprocess.Popen([sys.executable, "manage.py", "deliver_notifications"], cwd=ROOT, env=env,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: NotificationDelivery.objects.filter(pk=row.pk, status="sent").exists(), timeout=60,
                 message=lambda: f"the delivery ({log.read_text(errors='replace')[-2000:]})")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert [(r["json"]["id"], r["json"]["delivery_id"]) for r in hook.requests] == [(job.pk, row.pk)]
    assert NotificationDelivery.objects.get(pk=row.pk).attempts == 3
