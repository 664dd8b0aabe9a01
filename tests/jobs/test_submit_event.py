"""A job's history starts with its submission, written by the model (∅ → queued)."""
from contextlib import contextmanager

import pytest
from django.db import DatabaseError, connection

from trainhub.jobs.models import Job, JobEvent, Status
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


@contextmanager
def events_refused():
    """The database refuses every new ``JobEvent`` (a trigger): the second write of a submit or a transition
    fails after the first one went through, as a lost connection or a full disk would fail it."""
    pg = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        if pg:
            cursor.execute("CREATE FUNCTION refuse_event() RETURNS trigger LANGUAGE plpgsql AS "
                           "$$ BEGIN RAISE EXCEPTION 'events refused by the test'; END $$")
        cursor.execute("CREATE TRIGGER refuse_event BEFORE INSERT ON jobs_jobevent " + (
            "FOR EACH ROW EXECUTE FUNCTION refuse_event()" if pg else
            "BEGIN SELECT RAISE(ABORT, 'events refused by the test'); END"))
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER refuse_event" + (" ON jobs_jobevent" if pg else ""))
            if pg:
                cursor.execute("DROP FUNCTION refuse_event()")


@pytest.mark.django_db(transaction=True)  # the failed statement is the test's own, outside any transaction
def test_a_job_whose_first_event_cannot_be_written_is_neither_stored_nor_sent(monkeypatch, user, cpu_pool):
    """Both rows or neither, on each database (on PostgreSQL one statement writes both, elsewhere one
    transaction): a job without its history would be a row nobody can explain."""
    sent = []
    monkeypatch.setattr("trainhub.jobs.services.job_enqueue", sent.append)
    with events_refused(), pytest.raises(DatabaseError, match="events refused by the test"):
        job_submit(owner=user, data=TINY)
    assert not Job.objects.exists() and sent == []
    assert job_submit(owner=user, data=TINY).events.count() == 1  # the connection is fine afterwards


@pytest.mark.django_db(transaction=True)
def test_a_transition_whose_event_cannot_be_written_leaves_the_status_as_it_was(user, cpu_pool):
    job = Job.submit(owner=user, name="direct", mode="centralized", spec={}, pool=cpu_pool)
    with events_refused(), pytest.raises(DatabaseError, match="events refused by the test"):
        job.transition(Status.RUNNING, reason="claimed by nobody")  # on PostgreSQL one statement writes both
    assert Job.objects.get(pk=job.pk).status == "queued" and job.events.count() == 1
    assert Job.objects.get(pk=job.pk).transition(Status.RUNNING, reason="claimed")
