"""Notifications follow the model's final transitions, whoever makes them: no caller wraps the call."""
import pytest
from django.db import transaction

from trainhub.jobs.models import Status
from trainhub.notify import services
from trainhub.notify.models import NotificationDelivery

pytestmark = pytest.mark.usefixtures("allow_local_hooks")  # the receiver listens on 127.0.0.1


def test_a_final_transition_made_on_the_model_alone_notifies(running_job, receiver):
    hook = receiver()
    job = running_job(spec={"notify": {"webhook": hook.url, "on": ["failed"]}})

    assert job.transition(Status.FAILED, reason="stopped by hand", exit_code=9)  # no service, no worker
    services.wait_idle(30)

    delivery = NotificationDelivery.objects.get(job=job)
    assert (delivery.channel, delivery.status, delivery.event) == ("webhook", "sent", "failed")
    assert [r["json"]["status"] for r in hook.requests] == ["failed"]


def test_a_final_transition_that_rolls_back_notifies_nobody(running_job, receiver):
    hook = receiver()
    job = running_job(spec={"notify": {"webhook": hook.url, "on": ["failed"]}})

    with pytest.raises(RuntimeError), transaction.atomic():
        assert job.transition(Status.FAILED, reason="about to roll back")
        raise RuntimeError("the caller's transaction fails after the transition")
    services.wait_idle(30)

    assert not NotificationDelivery.objects.exists() and not hook.requests


def test_a_move_that_is_not_final_notifies_nobody(running_job, receiver):
    hook = receiver()
    job = running_job(spec={"notify": {"webhook": hook.url, "on": ["failed", "succeeded", "cancelled"]}})

    assert job.transition(Status.CANCELLING, reason="cancel asked")
    services.wait_idle(30)

    assert not NotificationDelivery.objects.exists()


def test_the_delivery_is_written_in_the_final_status_transaction_and_sent_after_it_commits(running_job, receiver):
    hook = receiver()
    job = running_job(spec={"notify": {"webhook": hook.url, "on": ["failed"]}})

    with transaction.atomic():
        assert job.transition(Status.FAILED, reason="exit code 1", exit_code=1)
        row = NotificationDelivery.objects.get(job=job)  # already there, inside the transaction
        assert (row.status, row.attempts) == ("pending", 0)
        assert (row.payload["status"], row.payload["exit_code"]) == ("failed", 1)
        assert not hook.requests  # nothing leaves before the commit
    assert services.wait_idle(30)
    assert [r["json"]["delivery_id"] for r in hook.requests] == [row.pk]
