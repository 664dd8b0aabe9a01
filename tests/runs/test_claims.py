"""Which job a worker claims, with which GPUs — the scheduler against the database, no Celery."""
import pytest
from django.db import IntegrityError, transaction

from trainhub.runs.lifecycle import jobs_reconcile
from trainhub.jobs.models import Job
from trainhub.jobs.services import job_submit
from trainhub.pools.models import Worker, WorkerPool
from trainhub.runs.models import GpuLease
from trainhub.runs.scheduling import claim_next

TINY = {"name": "t", "data": {"dataset": "iris"}, "model": {"name": "logreg"}, "train": {"epochs": 1}}


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    monkeypatch.setattr("trainhub.jobs.services.job_enqueue", lambda job: None)


@pytest.fixture
def gpu_pool(db):
    return WorkerPool.objects.create(name="gpu", kind="gpu", queue="gpu", slots_per_worker=8)


def gpu_job(user, gpus, **extra):
    return job_submit(owner=user, data={**TINY, "pool": "gpu", "mode": "ddp",
                                        "resources": {"procs_per_node": 1, "gpus_per_node": gpus}, **extra})


def test_higher_priority_runs_first_and_fifo_within_a_priority(cpu_pool, user, django_capture_on_commit_callbacks):
    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=4)
    cpu_pool.slots_per_worker = 4
    cpu_pool.save()
    low, first, second, urgent = (job_submit(owner=user, data={**TINY, "priority": p}) for p in (0, 5, 5, 9))
    assert [Job.objects.get(pk=j.pk).queue_position() for j in (low, first, second, urgent)] == [4, 2, 3, 1]
    order = [claim_next(low.pk, 1, hostname="w@test").job.pk for _ in range(4)]
    assert order == [urgent.pk, first.pk, second.pk, low.pk]
    assert Job.objects.get(pk=low.pk).queue_position() is None


def test_a_full_worker_waits_and_a_slot_change_takes_effect_at_the_next_claim(cpu_pool, user):
    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=4)
    a, b = job_submit(owner=user, data=TINY), job_submit(owner=user, data=TINY)
    assert claim_next(a.pk, 1, hostname="w@test").job.pk == a.pk
    waiting = claim_next(b.pk, 1, hostname="w@test")
    assert waiting.job is None and "slot" in waiting.wait
    assert Job.objects.get(pk=b.pk).status == "queued"
    WorkerPool.objects.filter(pk=cpu_pool.pk).update(slots_per_worker=2)  # as the admin does
    assert claim_next(b.pk, 1, hostname="w@test").job.pk == b.pk


def test_a_draining_pool_starts_nothing(cpu_pool, user):
    Worker.objects.create(hostname="w@test", pool=cpu_pool)
    job = job_submit(owner=user, data=TINY)
    WorkerPool.objects.filter(pk=cpu_pool.pk).update(state="draining")
    assert "draining" in claim_next(job.pk, 1, hostname="w@test").wait


def test_the_per_user_limit_lets_other_users_jobs_pass(cpu_pool, user, django_user_model):
    bob = django_user_model.objects.create_user("bob")
    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=4)
    WorkerPool.objects.filter(pk=cpu_pool.pk).update(slots_per_worker=4, max_running_per_user=1)
    a1, a2, b1 = job_submit(owner=user, data=TINY), job_submit(owner=user, data=TINY), job_submit(owner=bob, data=TINY)
    assert claim_next(a1.pk, 1, hostname="w@test").job.pk == a1.pk
    assert claim_next(a2.pk, 1, hostname="w@test").job.pk == b1.pk
    assert claim_next(a2.pk, 1, hostname="w@test").job is None


def test_gpu_jobs_get_distinct_gpus_and_a_job_that_does_not_fit_waits_while_a_smaller_one_backfills(gpu_pool, user):
    Worker.objects.create(hostname="g@test", pool=gpu_pool, gpu_count=4, threads=8)
    two = gpu_job(user, 2)
    three = gpu_job(user, 3)
    one = gpu_job(user, 1)
    first = claim_next(two.pk, 1, hostname="g@test")
    assert first.job.pk == two.pk and first.gpus == [0, 1]
    second = claim_next(three.pk, 1, hostname="g@test")
    assert second.job.pk == one.pk and second.gpus == [2]
    assert claim_next(three.pk, 1, hostname="g@test").job is None
    assert sorted(GpuLease.objects.values_list("index", flat=True)) == [0, 1, 2]


def test_the_database_refuses_a_second_lease_on_one_gpu(gpu_pool, user):
    worker = Worker.objects.create(hostname="g@test", pool=gpu_pool, gpu_count=1)
    a, b = gpu_job(user, 1), gpu_job(user, 1)
    GpuLease.objects.create(worker=worker, index=0, job=a, lease_token=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        GpuLease.objects.create(worker=worker, index=0, job=b, lease_token=1)


def test_a_lost_workers_job_gives_its_gpus_back_when_reconciled(gpu_pool, user):
    from datetime import timedelta

    from django.utils import timezone

    Worker.objects.create(hostname="g@test", pool=gpu_pool, gpu_count=2)
    job = gpu_job(user, 2)
    assert claim_next(job.pk, 1, hostname="g@test").gpus == [0, 1]
    Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert jobs_reconcile() == 1
    assert not GpuLease.objects.exists()
    assert Job.objects.get(pk=job.pk).status == "queued"  # a lost worker is an interruption, not a failure


def test_the_heartbeat_sweep_frees_gpus_of_finished_jobs_but_not_a_gathering_gangs(gpu_pool, user):
    from trainhub.runs.heartbeat import leases_sweep

    worker = Worker.objects.create(hostname="g@test", pool=gpu_pool, gpu_count=2)
    finished, gathering = gpu_job(user, 1), gpu_job(user, 1)
    Job.objects.filter(pk=finished.pk).update(status="failed")
    GpuLease.objects.create(worker=worker, index=0, job=finished, lease_token=1)
    GpuLease.objects.create(worker=worker, index=1, job=gathering, lease_token=1)
    assert leases_sweep() == 1
    assert list(GpuLease.objects.values_list("job_id", flat=True)) == [gathering.pk]


def test_a_multi_node_job_is_joined_not_started_until_its_gang_is_complete(gpu_pool, user):
    from trainhub.runs.models import GangMember

    for name in ("a@test", "b@test"):
        Worker.objects.create(hostname=name, pool=gpu_pool, gpu_count=2, threads=8)
    job = job_submit(owner=user, data={**TINY, "pool": "gpu", "mode": "ddp",
                                       "resources": {"nodes": 2, "procs_per_node": 1, "gpus_per_node": 2}})
    first = claim_next(job.pk, 1, hostname="a@test")
    assert first.member.node_rank == 0 and first.gpus == [0, 1] and first.member.address
    assert Job.objects.get(pk=job.pk).status == "queued"
    assert claim_next(job.pk, 1, hostname="a@test").job is None  # one place per worker
    second = claim_next(job.pk, 1, hostname="b@test")
    assert second.member.node_rank == 1
    assert GangMember.objects.filter(job=job).count() == 2 and GpuLease.objects.count() == 4


def test_a_worker_shutting_down_does_not_use_up_the_jobs_retries(cpu_pool, user):
    from trainhub.runs.lifecycle import Outcome, job_claim, job_finish

    job = job_submit(owner=user, data={**TINY, "max_restarts": 1})

    def run_once(outcome):
        claimed = job_claim(job.pk, Job.objects.get(pk=job.pk).attempt, hostname="w@test")
        assert claimed is not None
        assert job_finish(claimed, outcome)
        return Job.objects.get(pk=job.pk)

    after = run_once(Outcome("queued", -15, "the worker shut down; the job goes back to the queue"))
    assert (after.status, after.attempt, after.interruptions) == ("queued", 2, 1)
    after = run_once(Outcome("failed", 1, "exited with code 1"))
    assert (after.status, after.attempt) == ("queued", 3)  # its one retry, still there after the shutdown
    after = run_once(Outcome("failed", 1, "exited with code 1"))
    assert after.status == "failed" and after.error == "exited with code 1"  # the retry is used up now


def test_a_claim_of_a_row_read_before_it_was_requeued_takes_nothing(cpu_pool, user):
    """The claim takes the candidate row it read; if the job ran and went back to the queue in
    between (a new attempt), the compare-and-set names the attempt and claims nothing."""
    from trainhub.runs.lifecycle import job_claim

    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=2)
    job = job_submit(owner=user, data=TINY)
    stale = Job.objects.get(pk=job.pk)  # read as a candidate: queued, attempt 1
    Job.objects.filter(pk=job.pk).update(attempt=2)  # meanwhile another worker ran attempt 1, and it was retried
    assert job_claim(job.pk, 1, hostname="w@test", job=stale) is None
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.attempt, row.worker_id) == ("queued", 2, None)
    assert claim_next(job.pk, 2, hostname="w@test").job.pk == job.pk  # the new attempt's message still claims it


def test_a_claim_on_a_cpu_worker_in_a_pool_without_caps_reads_little(cpu_pool, user, django_assert_max_num_queries):
    """The claim is on the way from submit to running (docs/BENCHMARKS.md, "Submit latency"): with
    one queued owner, no per-user caps and no GPUs it reads the job, the worker, its pool, its slots and the
    owner's best job in one statement, then takes the job: on PostgreSQL in one more statement (the status and
    its event), elsewhere in one transaction (it was 6 reads and a savepoint, then 3 reads and a transaction)."""
    from django.db import connection

    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=2)
    job = job_submit(owner=user, data=TINY)
    with django_assert_max_num_queries(2 if connection.vendor == "postgresql" else 5):  # else BEGIN … COMMIT
        decision = claim_next(job.pk, 1, hostname="w@test")
    assert decision.job.pk == job.pk and decision.job.status == "running"
    assert decision.job.pool.name == cpu_pool.name


def test_postgres_a_workers_claim_statements_are_prepared_and_planned_once(cpu_pool, user):
    """On PostgreSQL a statement one connection runs five times is prepared there (settings: server-side
    binding, ``prepare_threshold``): the server plans the claim's statements once per connection, not at every
    claim (planning the first look cost more than running it). Without the setting nothing is prepared."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's prepared statements; SQLite keeps its own statement cache")
    Worker.objects.create(hostname="w@test", pool=cpu_pool)
    for _ in range(6):
        job = job_submit(owner=user, data=TINY)
        assert claim_next(job.pk, 1, hostname="w@test").job.pk == job.pk
        Job.objects.filter(pk=job.pk).update(status="succeeded")
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [statement for (statement,) in cursor.fetchall()]
    assert any("AS first_best" in s for s in prepared), prepared  # the first look
    assert any(s.startswith('WITH moved AS (UPDATE "jobs_job" SET "status"') for s in prepared), prepared  # the claim


@pytest.mark.django_db(transaction=True)
def test_postgres_claims_and_tokens_survive_a_column_added_while_their_statements_are_prepared(cpu_pool, user):
    """A migration that adds a column while workers and the web server run (their connections live on, with
    their prepared statements) must not break the hand-written statements: with ``SELECT *`` PostgreSQL refuses
    them ("cached plan must not change result type") on every such connection until it closes."""
    import psycopg
    from django.db import connection

    from tests.conftest import database_url
    from trainhub.api.models import ApiToken

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's prepared statements")
    Worker.objects.create(hostname="w@test", pool=cpu_pool)
    raw = ApiToken.issue(user, "t")[1]

    def claim_and_authenticate():
        for _ in range(6):  # more than prepare_threshold: the statements are prepared on this connection
            job = job_submit(owner=user, data=TINY)
            assert claim_next(job.pk, 1, hostname="w@test").job.pk == job.pk
            Job.objects.filter(pk=job.pk).update(status="succeeded")
            assert ApiToken.authenticate(raw).pk == user.pk

    claim_and_authenticate()
    tables = ("jobs_job", "pools_worker", "pools_workerpool", "auth_user")
    with psycopg.connect(database_url(), autocommit=True) as other:  # a later release's migration, elsewhere
        try:
            for table in tables:
                other.execute(f"ALTER TABLE {table} ADD COLUMN added_later integer")
            claim_and_authenticate()
        finally:
            for table in tables:
                other.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS added_later")


def test_a_claim_counts_running_jobs_and_gang_places_as_busy_slots_and_knows_a_stale_message(gpu_pool, cpu_pool,
                                                                                               user):
    """What the claim's first look reads in one statement, each part with the decision it leads to."""
    WorkerPool.objects.filter(pk=gpu_pool.pk).update(slots_per_worker=2)
    Worker.objects.create(hostname="a@test", pool=gpu_pool, gpu_count=4, threads=8)
    gang = gpu_job(user, 1, resources={"nodes": 2, "procs_per_node": 1, "gpus_per_node": 1})
    single, third = gpu_job(user, 1), gpu_job(user, 1)
    assert claim_next(gang.pk, 1, hostname="a@test").member is not None  # a place in the gang: one slot
    assert claim_next(single.pk, 1, hostname="a@test").job.pk == single.pk  # running here: the other slot
    busy = claim_next(third.pk, 1, hostname="a@test")
    assert busy.job is None and busy.wait == "all 2 slot(s) of a@test are busy"
    WorkerPool.objects.filter(pk=gpu_pool.pk).update(slots_per_worker=3)
    assert claim_next(third.pk, 1, hostname="a@test").job.pk == third.pk

    assert "not queued for this attempt" in claim_next(single.pk, 1, hostname="a@test").drop  # running already
    fresh = gpu_job(user, 1)
    assert "not queued for this attempt" in claim_next(fresh.pk, 2, hostname="a@test").drop  # another attempt's
    assert "not queued for this attempt" in claim_next(999999, 1, hostname="a@test").drop  # the job is gone
    assert claim_next(fresh.pk, 1, hostname="new@test").wait == "worker new@test is not registered yet"
    assert "not queued" in claim_next(single.pk, 1, hostname="new@test").drop
    other = job_submit(owner=user, data=TINY)  # the cpu pool's
    assert claim_next(other.pk, 1, hostname="a@test").wait == "the job belongs to another pool than gpu"
    assert Job.objects.get(pk=fresh.pk).status == Job.objects.get(pk=other.pk).status == "queued"
