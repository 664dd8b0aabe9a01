"""A cross-site job whose site's *worker* dies (SIGKILL of the Celery worker, not only of the site's
processes): another worker of the site's pool takes the place over as a restart of the site, the
site heals from its peer and rejoins, and both sites end with identical weights. Real workers,
real torchft (CPU, gloo). And the leader's worker killed: the job's lighthouse goes with it, and the
job is retried as a whole with a new one."""
from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from tests.conftest import wait_for
from tests.crosssite import sites
from trainhub.jobs.logs import read_lines
from trainhub.jobs.models import Job, JobEvent
from trainhub.jobs.services import job_submit
from trainhub.jobs.sites import site_rows
from trainhub.pools.models import Worker, WorkerPool
from trainhub.runs.models import GangMember

# the takeover's compare-and-set runs on both databases in test_takeover.py; what these add is the
# workers and torchft through a job: the SQLite pass
pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]
# leases of 5 s, beats of 1 s: a dead worker is noticed within ~6 s; its guard stops its processes in 1 s
ENV = {"TRAINHUB_WORKER_ADDRESS": "127.0.0.1", "TRAINHUB_LEASE_SECONDS": "5", "TRAINHUB_HEARTBEAT_SECONDS": "1",
       "TRAINHUB_GUARD_GRACE_SECONDS": "1", "OMP_NUM_THREADS": "1"}  # one thread per rank: the sites share 2 cores
NAMES = ("lab-a@test", "cloud-b@test", "cloud-b-2@test")
# with one thread per rank both sites train up to ~1,000 steps/s here (idle): the fault is injected
# on a sync seen in the site's events file (sites.wait_for_syncs), and lab-a is paused while it is
# handled, so the job is mid-run however fast the sites train
STEPS = 1000


@pytest.fixture
def workers(start_worker, db):
    for pool in ("lab-a", "cloud-b"):
        WorkerPool.objects.get_or_create(name=pool, defaults={"kind": "cpu", "queue": pool})
    started = {name: start_worker(name.split("@")[0].removesuffix("-2"), slots=1, name=name, extra_env=ENV)
               for name in NAMES}
    wait_for(lambda: Worker.objects.filter(hostname__in=NAMES).count() == 3, message="the three workers to register")
    return started


@pytest.mark.parametrize("how", ["killed", "stopped while its pool drains"])
def test_a_sites_worker_lost_mid_run_is_replaced_by_another_worker_of_its_pool(how, workers, user, live_settings):
    # min_sites 2: lab-a cannot sync alone, so it waits (its syncs time out and the round is trained
    # again) until cloud-b is back and heals from it; a short job does not end before that
    job = job_submit(owner=user, data={
        "name": "worker-lost", "mode": "ddp", "sites": [{"pool": "lab-a"}, {"pool": "cloud-b"}], "max_restarts": 1,
        "sync": {"algorithm": "diloco", "every": 50, "timeout_seconds": 10, "min_sites": 2},
        "data": {"dataset": "digits", "batch_size": 32}, "train": {"max_steps": STEPS, "epochs": 1000}})
    sites.wait_for_syncs(job.pk, "cloud-b", 2)
    holder = GangMember.objects.select_related("worker").get(job=job, node_rank=1).worker.hostname
    spare = next(name for name in NAMES[1:] if name != holder)
    assert sites.site_processes(job.pk, "cloud-b")
    # lab-a paused (SIGSTOP) until the spare has taken the place: with min_sites 2 neither site passes its
    # next sync meanwhile, so the job is mid-run when the fault has been handled, however fast this machine
    # trains (~1,000 steps/s idle: cued on the database's metrics, ~1 s late, the pool's drain landed after
    # the job's end)
    with sites.frozen(job.pk):
        if how == "killed":
            os.kill(workers[holder].proc.pid, signal.SIGKILL)  # the worker itself: its heartbeat stops
        else:  # an admin drains the pool and stops its worker: the site waits, lost, until the pool takes jobs
            WorkerPool.objects.filter(name="cloud-b").update(state="draining")
            workers[holder].stop(signal.SIGTERM)  # a graceful stop: it stops the site's processes and leaves
            wait_for(lambda: site_rows(Job.objects.get(pk=job.pk))[1]["state"] ==
                     "lost, waiting for another worker of its pool", timeout=30,
                     message="the Sites panel to show it lost")
            assert GangMember.objects.get(job=job, node_rank=1).worker.hostname == holder  # draining: none taken
            WorkerPool.objects.filter(name="cloud-b").update(state="enabled")
        wait_for(lambda: GangMember.objects.get(job=job, node_rank=1).worker.hostname == spare, timeout=60,
                 message=f"{spare} to take over cloud-b's place from {holder}")

    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed", "cancelled"]).first(),
                    timeout=400, message="the job to finish")
    assert done.status == "succeeded", done.error
    assert done.attempt == 1  # the job went on: only the site started again
    text = "\n".join(line.text for line in read_lines(job.pk, limit=100000))
    assert (f"[site cloud-b] site lost: its worker {holder} is gone (stopped, or no heartbeat within its lease); "
            f"worker {spare} takes its place (restart 1)") in text
    # healed: the new runner's first sync is past the two the site had made (lab-a's outer step), not at 1
    rejoined = sites.syncs_since_its_last_start(job.pk, "cloud-b")
    assert rejoined and rejoined[0]["sync_outer_step"] > 2 and rejoined[0]["sync_participants"] == 2, rejoined
    cloud_b = site_rows(Job.objects.get(pk=job.pk))[1]  # the job page's Sites panel
    assert (cloud_b["state"], cloud_b["restarts"], cloud_b["outer_step"]) == ("finished", 1, STEPS // 50)
    runs = live_settings.TRAINHUB_RUNS_DIR
    assert sites.same_weights(sites.final_weights(runs / f"job-{job.pk}", STEPS),
                              sites.final_weights(runs / f"job-{job.pk}-site-cloud-b", STEPS))
    assert not sites.site_processes(job.pk, "cloud-b")


def test_the_leaders_worker_killed_takes_the_lighthouse_with_it_and_the_job_is_retried_with_a_new_one(
        start_worker, user, live_settings):
    """Place 0's worker runs the job's lighthouse, the single point of failure: killed, the job is
    retried as a whole (an interruption, not a failure) with a new lighthouse, on the spare worker."""
    for pool in ("lab-a", "cloud-b"):
        WorkerPool.objects.get_or_create(name=pool, defaults={"kind": "cpu", "queue": pool})
    names = ("lab-a@test", "lab-a-2@test", "cloud-b@test")
    started = {name: start_worker(name.split("@")[0].removesuffix("-2"), slots=1, name=name, extra_env=ENV)
               for name in names}
    wait_for(lambda: Worker.objects.filter(hostname__in=names).count() == 3, message="the three workers to register")
    job = job_submit(owner=user, data={
        "name": "leader-lost", "mode": "ddp", "sites": [{"pool": "lab-a"}, {"pool": "cloud-b"}], "max_restarts": 0,
        "sync": {"algorithm": "diloco", "every": 50, "timeout_seconds": 10, "min_sites": 2},
        "data": {"dataset": "digits", "batch_size": 32}, "train": {"max_steps": STEPS, "epochs": 1000}})
    sites.wait_for_syncs(job.pk, "", 2)
    leader = GangMember.objects.select_related("worker").get(job=job, node_rank=0)
    lighthouse = leader.lighthouse
    os.kill(started[leader.worker.hostname].proc.pid, signal.SIGKILL)

    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed", "cancelled"]).first(),
                    timeout=400, message="the job to finish")
    assert done.status == "succeeded", done.error
    assert (done.attempt, done.interruptions) == (2, 1)  # losing the machine is not the job's failure
    again = GangMember.objects.select_related("worker").get(job=job, attempt=2, node_rank=0)
    spare = next(name for name in names[:2] if name != leader.worker.hostname)
    assert again.worker.hostname == spare and again.lighthouse and again.lighthouse != lighthouse
    runs = live_settings.TRAINHUB_RUNS_DIR
    assert sites.same_weights(sites.final_weights(runs / f"job-{job.pk}", STEPS),
                              sites.final_weights(runs / f"job-{job.pk}-site-cloud-b", STEPS))
    assert not [p for p in psutil.process_iter(["cmdline"]) if lighthouse.rsplit(":", 1)[1] in " ".join(
        p.info["cmdline"] or []) and "torchft_lighthouse" in " ".join(p.info["cmdline"] or [])]


def test_the_leader_keeps_the_jobs_lease_while_another_site_ends_long_after_its_own(workers, user):
    """Site 0 ends and its worker waits for the other site's last lines; that site ends well after the
    5 s lease (paused here, as a slow or stalled site would be). The leader renews the job's lease while
    it waits, so nobody takes the job for a lost worker's: it succeeds as its first attempt."""
    job = job_submit(owner=user, data={
        "name": "late-site", "mode": "ddp", "sites": [{"pool": "lab-a"}, {"pool": "cloud-b"}], "max_restarts": 0,
        # min_sites 1: lab-a trains on alone to its end while cloud-b is paused
        "sync": {"algorithm": "diloco", "every": 50, "timeout_seconds": 5, "min_sites": 1},
        "data": {"dataset": "digits", "batch_size": 32}, "train": {"max_steps": STEPS, "epochs": 1000}})
    sites.wait_for_syncs(job.pk, "cloud-b", 2)
    lab_a_events = sites.site_run_dir(job.pk) / "events.jsonl"
    with sites.frozen(job.pk, "cloud-b"):
        wait_for(lambda: lab_a_events.exists() and '"type": "end"' in lab_a_events.read_text(encoding="utf-8"),
                 timeout=120,
                 message="site lab-a to end while cloud-b is paused")
        time.sleep(8)  # past the 5 s lease and the reconcile's next look (1 s beats)
        assert Job.objects.get(pk=job.pk).status == "running"
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed", "cancelled"]).first(),
                    timeout=180, message="the job to finish")
    assert done.status == "succeeded", done.error
    assert (done.attempt, done.interruptions) == (1, 0)
    assert not JobEvent.objects.filter(job=job, reason__contains="interrupted").exists()
