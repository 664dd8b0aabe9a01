"""Fair limits: one user's deep queue cannot crowd out the rest, and per-pool per-user caps hold."""
import pytest

from tests.conftest import wait_for
from trainhub.jobs.models import Job
from trainhub.jobs.services import job_cancel, job_submit
from trainhub.pools.models import Worker, WorkerPool
from trainhub.runs.scheduling import claim_next

TINY = {"name": "t", "data": {"dataset": "iris"}, "model": {"name": "logreg"}, "train": {"epochs": 1}}


@pytest.fixture
def no_broker(monkeypatch):
    monkeypatch.setattr("trainhub.jobs.services.job_enqueue", lambda job: None)


def queue(owner, count, **extra):
    return [job_submit(owner=owner, data={**TINY, **extra}) for _ in range(count)]


def test_a_user_with_250_queued_jobs_does_not_starve_a_later_user(cpu_pool, user, django_user_model, no_broker):
    bob = django_user_model.objects.create_user("bob")
    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=2)
    WorkerPool.objects.filter(pk=cpu_pool.pk).update(slots_per_worker=2)
    alices = queue(user, 250)
    assert claim_next(alices[0].pk, 1, hostname="w@test").job.pk == alices[0].pk
    bobs = job_submit(owner=bob, data=TINY)
    assert Job.objects.get(pk=bobs.pk).queue_position() == 1
    assert claim_next(alices[1].pk, 1, hostname="w@test").job.pk == bobs.pk


def test_with_one_slot_two_users_take_turns(cpu_pool, user, django_user_model, no_broker):
    bob = django_user_model.objects.create_user("bob")
    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=1)
    alices = queue(user, 250)
    first = claim_next(alices[0].pk, 1, hostname="w@test").job
    bobs = job_submit(owner=bob, data=TINY)
    Job.objects.get(pk=first.pk).transition("succeeded", reason="done")
    assert claim_next(alices[1].pk, 1, hostname="w@test").job.pk == bobs.pk


def test_priority_still_orders_one_users_jobs_and_a_job_that_does_not_fit_blocks_nothing(
        user, django_user_model, no_broker):
    WorkerPool.objects.create(name="gpu", kind="gpu", queue="gpu", slots_per_worker=4)
    Worker.objects.create(hostname="g@test", pool=WorkerPool.objects.get(name="gpu"), gpu_count=2, threads=4)
    gpu = {"pool": "gpu", "mode": "ddp"}
    big = job_submit(owner=user, data={**TINY, **gpu, "priority": 9, "resources": {"gpus_per_node": 2}})
    Job.objects.filter(pk=big.pk).update(spec={**big.spec, "resources": {**big.spec["resources"], "gpus_per_node": 4}})
    small = job_submit(owner=user, data={**TINY, **gpu, "priority": 1, "resources": {"gpus_per_node": 1}})
    assert claim_next(big.pk, 1, hostname="g@test").job.pk == small.pk


def test_the_running_cap_holds_a_users_jobs_and_staff_may_exceed_it(cpu_pool, user, django_user_model, no_broker):
    root = django_user_model.objects.create_user("root", is_staff=True)
    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=4)
    WorkerPool.objects.filter(pk=cpu_pool.pk).update(slots_per_worker=4, max_running_per_user=1)
    a1, a2 = queue(user, 2)
    r1, r2 = queue(root, 2)
    started = {claim_next(a2.pk, 1, hostname="w@test").job.pk for _ in range(3)}
    assert started == {a1.pk, r1.pk, r2.pk}
    waiting = claim_next(a2.pk, 1, hostname="w@test")
    assert waiting.job is None and "max_running_per_user = 1" in waiting.wait
    assert Job.objects.get(pk=a2.pk).status == "queued"


def test_the_gpu_cap_holds_a_users_gpu_jobs(user, no_broker):
    pool = WorkerPool.objects.create(name="gpu", kind="gpu", queue="gpu", slots_per_worker=4, max_gpus_per_user=2)
    Worker.objects.create(hostname="g@test", pool=pool, gpu_count=4, threads=4)
    jobs = [job_submit(owner=user, data={**TINY, "pool": "gpu", "mode": "ddp", "resources": {"gpus_per_node": 2}})
            for _ in range(2)]
    assert claim_next(jobs[0].pk, 1, hostname="g@test").job.pk == jobs[0].pk
    waiting = claim_next(jobs[1].pk, 1, hostname="g@test")
    assert waiting.job is None and "max_gpus_per_user = 2" in waiting.wait


@pytest.mark.slow
def test_a_later_users_job_starts_next_on_a_real_one_slot_worker(start_worker, cpu_pool, user, django_user_model,
                                                                 monkeypatch, transactional_db):
    from tests.runs.test_live_scheduling import online

    bob = django_user_model.objects.create_user("bob")
    start_worker("cpu", slots=1, name="fair1@test")
    online("fair1@test")
    # alice's first job holds the one slot until bob's job is queued, however long queueing her 250
    # takes (a 1-epoch job once ended meanwhile, and her next job took the free slot before bob asked)
    blocker = job_submit(owner=user, data={**TINY, "train": {"epochs": 100000}})
    wait_for(lambda: Job.objects.get(pk=blocker.pk).status == "running", timeout=120, message="alice's job to start")
    with monkeypatch.context() as quiet:  # queued without run messages: the claim still sees them all
        quiet.setattr("trainhub.jobs.services.job_enqueue", lambda job: None)
        alices = queue(user, 250)
    bobs = job_submit(owner=bob, data=TINY)
    assert Job.objects.get(pk=blocker.pk).status == "running"  # the slot was still alice's when bob asked
    job_cancel(Job.objects.get(pk=blocker.pk))  # the slot frees: who gets it next?
    wait_for(lambda: Job.objects.get(pk=bobs.pk).status == "succeeded", timeout=180, message="bob's job to finish")
    bob_started = Job.objects.get(pk=bobs.pk).started_at
    alice_started = Job.objects.filter(pk__in=[j.pk for j in alices], started_at__isnull=False)
    assert not alice_started.filter(started_at__lte=bob_started).exists()  # the slot's next job was bob's
    for job in alices:
        job_cancel(Job.objects.get(pk=job.pk))
