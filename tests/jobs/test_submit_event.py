"""A job's history starts with its submission, written by the model (∅ → queued)."""
from trainhub.jobs.models import Job, JobEvent
from trainhub.jobs.services import job_submit

TINY = {"name": "first-event", "data": {"dataset": "iris"}, "model": {"name": "logreg"}, "train": {"epochs": 1}}


def test_a_submitted_job_is_queued_with_its_first_event_naming_who(monkeypatch, user, cpu_pool):
    monkeypatch.setattr("trainhub.jobs.services.job_enqueue", lambda job: None)
    job = job_submit(owner=user, data=TINY)
    assert Job.objects.get(pk=job.pk).status == "queued"
    event = JobEvent.objects.get(job=job)
    assert (event.old, event.new, event.reason, event.actor) == ("", "queued", "submitted", user)


def test_job_submit_on_the_model_writes_the_first_event_too(user, cpu_pool):
    job = Job.submit(owner=user, name="direct", mode="centralized", spec={}, pool=cpu_pool, reason="imported")
    assert [(e.old, e.new, e.reason) for e in job.events.all()] == [("", "queued", "imported")]
