"""Handing a cross-site job's place whose worker is gone to another worker of its pool: who may
take it, once, and what happens when the site's restarts are used up (database level; the whole
path with real workers is test_site_worker_loss.py)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.crosssite import sites
from trainhub.jobs.models import Job
from trainhub.pools.models import Worker, WorkerPool
from trainhub.runs import crosssite
from trainhub.runs.models import GangMember


def running(user, max_restarts: int = 1) -> Job:
    job = sites.running_job(user, max_restarts=max_restarts)
    Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() + timedelta(minutes=5))
    Worker.objects.update(last_heartbeat=timezone.now())
    return Job.objects.get(pk=job.pk)


@pytest.fixture
def job(user):
    return running(user)


def lose(member: GangMember) -> None:
    Worker.objects.filter(pk=member.worker_id).update(last_heartbeat=timezone.now() - timedelta(minutes=5))


def test_another_worker_of_the_sites_pool_takes_a_lost_place_once(job):
    place = GangMember.objects.get(job=job, node_rank=1)
    spare = Worker.objects.create(hostname="cloud-b@spare", pool=WorkerPool.objects.get(name="cloud-b"))
    args = (job.pk, job.attempt, 1, place.worker_id, 0)
    assert crosssite.take_over(*args, worker=spare, gpus=[]) is None  # its worker is alive: not lost
    lose(place)
    taken = crosssite.take_over(*args, worker=spare, gpus=[])
    assert (taken.worker_id, taken.restarts, taken.done) == (spare.pk, 1, False)
    other = Worker.objects.create(hostname="cloud-b@other", pool=spare.pool)
    assert crosssite.take_over(*args, worker=other, gpus=[]) is None  # taken already: the compare fails


def test_a_lost_place_whose_site_has_no_restarts_left_fails_the_job_naming_the_site(user):
    job = running(user, max_restarts=0)
    place = GangMember.objects.get(job=job, node_rank=1)
    lose(place)
    assert crosssite.places_reconcile() == 1
    job.refresh_from_db()
    assert job.status == "failed"
    assert "site cloud-b failed for good: its worker cloud-b@w stopped heart-beating" in job.error
    assert GangMember.objects.get(pk=place.pk).site_state == "failed"


def test_place_0s_worker_lost_is_not_a_site_takeover(job):
    lose(GangMember.objects.get(job=job, node_rank=0))  # the leader: the job's lease says it (retried whole)
    assert crosssite.places_reconcile() == 0
    assert Job.objects.get(pk=job.pk).status == "running"
