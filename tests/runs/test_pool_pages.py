"""Staff pool pages: workers, GPU holders, queue, running jobs, and actions recorded in the history."""
import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.messages import get_messages

from trainhub.jobs.models import Job
from trainhub.jobs.services import job_submit
from trainhub.pools.models import Worker, WorkerPool
from trainhub.runs.models import GpuLease

TINY = {"name": "queued-one", "data": {"dataset": "iris"}, "model": {"name": "logreg"}, "train": {"epochs": 1}}


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    monkeypatch.setattr("trainhub.jobs.services.job_enqueue", lambda job: None)


@pytest.fixture
def staff_client(client, django_user_model):
    admin = django_user_model.objects.create_user("root", is_staff=True, is_superuser=True)
    client.force_login(admin)
    return client


def test_the_pool_pages_are_for_staff_only(user_client, cpu_pool):
    assert user_client.get("/pools/").status_code == 302
    assert user_client.get("/pools/cpu").status_code == 302


def test_the_pool_page_shows_workers_gpu_holders_and_the_queue(staff_client, user):
    pool = WorkerPool.objects.create(name="gpu", kind="gpu", queue="gpu")
    worker = Worker.objects.create(hostname="g1@test", pool=pool, gpu_count=2, info={"cpus": 8, "memory_gb": 32})
    job = job_submit(owner=user, data={**TINY, "pool": "gpu"})
    holder = job_submit(owner=user, data={**TINY, "name": "holder", "pool": "gpu"})
    GpuLease.objects.create(worker=worker, index=1, job=holder, lease_token=1)
    page = staff_client.get("/pools/gpu").content.decode()
    assert "g1@test" in page and "online" in page
    assert f"job #{holder.pk}" in page and "free" in page
    assert f"#{job.pk} queued-one" in page
    assert "gpu" in staff_client.get("/pools/").content.decode()


def test_drain_and_cancel_from_the_page_take_effect_and_are_recorded(staff_client, cpu_pool, user):
    job = job_submit(owner=user, data=TINY)
    assert staff_client.post("/pools/cpu/state", {"state": "draining"}).status_code == 302
    assert WorkerPool.objects.get(pk=cpu_pool.pk).state == "draining"
    staff_client.post("/pools/cpu/cancel")
    assert Job.objects.get(pk=job.pk).status == "cancelled"
    messages = list(LogEntry.objects.values_list("change_message", flat=True))
    assert "state enabled → draining" in messages and "cancelled 1 job(s)" in messages
    page = staff_client.get("/pools/cpu").content.decode()
    assert "state enabled → draining" in page and "root" in page


def post_pool_edit(client, pool, **changes):
    """Save ``pool``'s admin change form as a staff user would, with ``changes`` to its fields."""
    form = {"name": pool.name, "kind": "cpu", "queue": pool.queue, "state": "enabled", "description": "",
            "slots_per_worker": 1, "gpus_per_worker": 0, "modes": "", "max_running_per_user": 0,
            "max_gpus_per_user": 0, "max_queued_per_user": 0, "max_timeout_minutes": 0, "max_restarts_limit": 5,
            "default_priority": 0, "max_priority": 100, "default_timeout_minutes": 0, "log_retention_lines": 0,
            "sandbox": pool.sandbox, "workers-TOTAL_FORMS": 0, "workers-INITIAL_FORMS": 0, **changes}
    return client.post(f"/admin/pools/workerpool/{pool.pk}/change/", form)


def test_an_admin_edit_is_recorded_with_who_and_what(staff_client, cpu_pool):
    response = post_pool_edit(staff_client, cpu_pool, slots_per_worker=3)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert WorkerPool.objects.get(pk=cpu_pool.pk).slots_per_worker == 3
    entry = LogEntry.objects.get()
    assert entry.user.username == "root" and "Slots per worker" in entry.get_change_message()



def test_raising_slots_beyond_a_workers_threads_warns_how_to_fix_it(staff_client, cpu_pool):
    Worker.objects.create(hostname="small@test", pool=cpu_pool, threads=2)
    response = post_pool_edit(staff_client, cpu_pool, slots_per_worker=3)
    shown = " ".join(str(m) for m in get_messages(response.wsgi_request))
    assert "small@test can run fewer than 3 jobs" in shown and "--slots 3" in shown


def test_a_queued_jobs_page_shows_its_place_in_the_pools_queue(user_client, user, cpu_pool):
    Worker.objects.create(hostname="w@test", pool=cpu_pool)  # online: the place in the queue is the reason
    job_submit(owner=user, data=TINY)
    second = job_submit(owner=user, data=TINY)
    urgent = job_submit(owner=user, data={**TINY, "priority": 5})
    assert "#1 in the queue of pool cpu" in user_client.get(f"/jobs/{urgent.pk}").content.decode()
    assert "#3 in the queue of pool cpu" in user_client.get(f"/jobs/{second.pk}?fragment=status").content.decode()


def test_the_admins_cancel_action_cancels_every_job_of_the_selected_pools(staff_client, cpu_pool, user):
    job = job_submit(owner=user, data=TINY)
    response = staff_client.post("/admin/pools/workerpool/", {"action": "cancel_jobs", "_selected_action": [cpu_pool.pk]})
    assert response.status_code == 302
    assert Job.objects.get(pk=job.pk).status == "cancelled"
    assert "1 job(s) cancelled" in " ".join(str(m) for m in get_messages(response.wsgi_request))
