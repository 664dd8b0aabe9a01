import pytest

from trainhub.jobs.models import TRANSITIONS, IllegalTransition, Job, JobEvent, Status

ALL = list(Status.values)
# The status machine stated here, not derived from the code under test: a wrong edge in
# TRANSITIONS must fail this file. (DESIGN.md: queued → running → succeeded | failed |
# cancelled, cancelling while a cancel is carried out, queued again for a retry.)
LEGAL = [
    ("queued", "running"), ("queued", "cancelled"), ("queued", "failed"),
    ("running", "succeeded"), ("running", "failed"), ("running", "cancelling"), ("running", "queued"),
    ("cancelling", "cancelled"), ("cancelling", "succeeded"), ("cancelling", "failed"),
]
ILLEGAL = [(old, new) for old in ALL for new in ALL if (old, new) not in LEGAL]


@pytest.fixture
def job(user, cpu_pool):
    return Job.objects.create(owner=user, name="j", mode="centralized", spec={}, pool=cpu_pool)


def _set(job, status):
    Job.objects.filter(pk=job.pk).update(status=status)
    job.refresh_from_db()


@pytest.mark.parametrize("old,new", LEGAL)
def test_every_legal_transition_changes_status_and_records_an_event(job, user, old, new):
    _set(job, old)
    assert job.transition(new, reason="because", actor=user)
    job.refresh_from_db()
    assert job.status == new
    event = JobEvent.objects.get(job=job)
    assert (event.old, event.new, event.reason, event.actor) == (old, new, "because", user)


@pytest.mark.parametrize("old,new", ILLEGAL)
def test_every_illegal_transition_is_refused_and_leaves_no_trace(job, old, new):
    _set(job, old)
    with pytest.raises(IllegalTransition):
        job.transition(new)
    job.refresh_from_db()
    assert job.status == old
    assert not JobEvent.objects.filter(job=job).exists()


def test_a_stale_instance_loses_the_compare_and_set(job):
    other = Job.objects.get(pk=job.pk)
    assert other.transition(Status.CANCELLED)
    assert job.transition(Status.RUNNING) is False  # it still believed the job was queued
    job.refresh_from_db()
    assert job.status == Status.CANCELLED
    assert JobEvent.objects.filter(job=job).count() == 1


def test_final_transitions_stamp_finish_time_and_running_stamps_start(job):
    assert job.transition(Status.RUNNING)
    assert job.started_at is not None
    assert job.transition(Status.SUCCEEDED, exit_code=0)
    job.refresh_from_db()
    assert job.finished_at >= job.started_at and job.exit_code == 0


def test_the_table_names_every_status():
    assert sorted(ALL) == sorted({"queued", "running", "cancelling", "succeeded", "failed", "cancelled"})


def test_final_statuses_have_no_way_out():
    for status in (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED):
        assert TRANSITIONS[status] == frozenset()
