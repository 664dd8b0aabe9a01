"""The owner gets an e-mail through Django's mail settings when a job ends."""
from django.core import mail

from trainhub.runs.lifecycle import Outcome, job_finish
from trainhub.notify import services
from trainhub.notify.models import NotificationDelivery, NotifySettings


def test_the_owner_is_emailed_when_a_job_fails(running_job, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    NotifySettings.objects.create(user=running_job.owner, email=True, events=["failed"])
    job = running_job()
    assert job_finish(job, Outcome("failed", 2, "exit code 2: out of memory"))
    services.wait_idle(30)

    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == ["bob@example.test"]
    assert f"job #{job.pk} digits failed" in message.subject
    assert "out of memory" in message.body and f"/jobs/{job.pk}" in message.body
    delivery = NotificationDelivery.objects.get(job=job)
    assert (delivery.channel, delivery.status, delivery.attempts) == ("email", "sent", 1)


def test_the_spec_can_turn_the_email_off_for_one_job(running_job, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    NotifySettings.objects.create(user=running_job.owner, email=True)
    job_finish(running_job(spec={"notify": {"email": False}}), Outcome("succeeded", 0, "exit 0"))
    services.wait_idle(30)
    assert mail.outbox == []


def test_an_owner_without_an_address_gets_a_recorded_failure_not_a_crash(running_job, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    running_job.owner.email = ""
    running_job.owner.save()
    job = running_job(spec={"notify": {"email": True}})
    assert job_finish(job, Outcome("succeeded", 0, "exit 0"))
    services.wait_idle(30)
    delivery = NotificationDelivery.objects.get(job=job)
    assert delivery.status == "failed" and delivery.attempts == 1 and "no e-mail address" in delivery.result
