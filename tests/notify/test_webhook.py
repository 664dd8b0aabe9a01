"""A finished job POSTs its result to the owner's (or the spec's) webhook, retrying with backoff."""
import socket

import pytest

from trainhub.runs.lifecycle import Outcome, job_finish
from trainhub.jobs.models import Job
from trainhub.notify import services
from trainhub.notify.models import NotificationDelivery, NotifySettings

pytestmark = pytest.mark.usefixtures("allow_local_hooks")  # the receivers listen on 127.0.0.1


def _finish(job, status="succeeded", exit_code=0, reason="exit 0"):
    assert job_finish(job, Outcome(status, exit_code, reason))
    services.wait_idle(30)


def test_the_webhook_is_retried_with_backoff_until_the_receiver_answers(running_job, receiver, fast_backoff):
    hook = receiver([500, 503])
    job = running_job()
    NotifySettings.objects.create(user=running_job.owner, webhook_url=hook.url)
    _finish(job)

    assert len(hook.requests) == 3
    gaps = [b["at"] - a["at"] for a, b in zip(hook.requests, hook.requests[1:])]
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2  # 1x then 2x the base delay
    body = hook.requests[-1]["json"]
    assert body["id"] == job.pk and body["name"] == "digits" and body["status"] == "succeeded"
    assert body["owner"] == "bob" and body["pool"] == "cpu" and body["attempt"] == 1
    assert body["exit_code"] == 0 and body["error"] == "" and body["event"] == "job.succeeded"
    assert body["started_at"] and body["finished_at"]
    assert body["url"].endswith(f"/jobs/{job.pk}")
    assert hook.requests[-1]["headers"]["Content-Type"] == "application/json"
    delivery = NotificationDelivery.objects.get(job=job)
    assert (delivery.channel, delivery.status, delivery.attempts, delivery.target) == ("webhook", "sent", 3, hook.url)


def test_a_receiver_that_keeps_failing_is_given_up_after_five_tries_and_the_job_keeps_its_status(
        running_job, receiver, settings):
    settings.TRAINHUB_NOTIFY_BACKOFF_SECONDS = 0.01
    hook = receiver([500] * 10)
    job = running_job()
    NotifySettings.objects.create(user=running_job.owner, webhook_url=hook.url, events=["failed"])
    _finish(job, "failed", 3, "exit code 3")

    assert len(hook.requests) == 5
    assert hook.requests[0]["json"]["error"] == "exit code 3"
    delivery = NotificationDelivery.objects.get(job=job)
    assert delivery.status == "failed" and delivery.attempts == 5 and "HTTP 500" in delivery.last_error
    assert Job.objects.get(pk=job.pk).status == "failed"


def test_a_4xx_answer_is_not_retried(running_job, receiver, fast_backoff):
    hook = receiver([404])
    job = running_job(spec={"notify": {"webhook": hook.url}})
    _finish(job)
    assert len(hook.requests) == 1
    delivery = NotificationDelivery.objects.get(job=job)
    assert delivery.status == "failed" and "404" in delivery.last_error


def test_an_unreachable_webhook_never_fails_or_delays_the_job(running_job, settings):
    settings.TRAINHUB_NOTIFY_BACKOFF_SECONDS = 0.01
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/hook"  # nothing listens once closed
    job = running_job(spec={"notify": {"webhook": dead}})
    assert job_finish(job, Outcome("succeeded", 0, "exit 0"))  # returns before any delivery
    assert Job.objects.get(pk=job.pk).status == "succeeded"
    services.wait_idle(30)
    delivery = NotificationDelivery.objects.get(job=job)
    assert delivery.status == "failed" and delivery.attempts == 5


def test_the_specs_notify_section_overrides_the_owners_settings(running_job, receiver, fast_backoff):
    mine, spec_hook = receiver(), receiver()
    NotifySettings.objects.create(user=running_job.owner, webhook_url=mine.url, events=["failed"])
    job = running_job(spec={"notify": {"webhook": spec_hook.url, "on": ["succeeded"]}})
    _finish(job)
    assert len(spec_hook.requests) == 1 and mine.requests == []


def test_statuses_the_owner_did_not_ask_for_send_nothing(running_job, receiver, fast_backoff):
    hook = receiver()
    NotifySettings.objects.create(user=running_job.owner, webhook_url=hook.url, events=["failed"])
    _finish(running_job())
    assert hook.requests == [] and not NotificationDelivery.objects.exists()


def test_a_failed_attempt_that_will_be_retried_sends_nothing_until_the_final_status(running_job, receiver,
                                                                                    fast_backoff, monkeypatch):
    monkeypatch.setattr("trainhub.jobs.services.job_enqueue", lambda job: None)
    hook = receiver()
    NotifySettings.objects.create(user=running_job.owner, webhook_url=hook.url, events=["failed"])
    job = running_job(spec={"max_restarts": 1})
    assert job_finish(job, Outcome("failed", 1, "exit code 1"))
    services.wait_idle(30)
    assert Job.objects.get(pk=job.pk).status == "queued" and hook.requests == []


def test_a_cancelled_job_is_reported_as_cancelled(running_job, receiver, fast_backoff):
    hook = receiver()
    NotifySettings.objects.create(user=running_job.owner, webhook_url=hook.url, events=["cancelled"])
    job = running_job(status="cancelling")
    _finish(job, "failed", -15, "cancelled by user")
    assert [r["json"]["status"] for r in hook.requests] == ["cancelled"]


def test_cancelling_a_queued_job_notifies_once(running_job, receiver, fast_backoff):
    from trainhub.jobs.services import job_cancel

    hook = receiver()
    NotifySettings.objects.create(user=running_job.owner, webhook_url=hook.url, events=["cancelled"])
    job = running_job(status="queued", lease_token=0, started_at=None)
    assert job_cancel(job, reason="cancelled by user")
    assert not job_cancel(Job.objects.get(pk=job.pk))  # the second cancel is a no-op and sends nothing
    services.wait_idle(30)
    assert [(r["json"]["event"], r["json"]["id"]) for r in hook.requests] == [("job.cancelled", job.pk)]


def test_a_gang_that_times_out_notifies_its_failure(running_job, receiver, fast_backoff, monkeypatch):
    from trainhub.pools.models import Worker
    from trainhub.runs.gang import gang_wait
    from trainhub.runs.models import GangMember

    hook = receiver()
    NotifySettings.objects.create(user=running_job.owner, webhook_url=hook.url, events=["failed"])
    job = running_job(status="queued", lease_token=0, started_at=None, attempt=1)
    worker = Worker.objects.create(hostname="alone@test", pool=job.pool)
    member = GangMember.objects.create(job=job, attempt=1, worker=worker, node_rank=0, lease_token=0)
    monkeypatch.setattr("django.conf.settings.TRAINHUB_GANG_TIMEOUT_SECONDS", 0)  # read once, in settings
    assert gang_wait(member, nodes=2).startswith("gang timeout: only 1 of 2 workers")
    services.wait_idle(30)
    assert [r["json"]["event"] for r in hook.requests] == ["job.failed"]
    assert "gang timeout" in hook.requests[0]["json"]["error"]
