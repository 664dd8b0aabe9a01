"""Why a queued job waits, as the API, the job page and the job list say it."""
import pytest

from trainhub.api.models import ApiToken
from trainhub.jobs.models import Job
from trainhub.pools.models import Worker, WorkerPool
from trainhub.runs import waiting
from trainhub.runs.scheduling import claim_next

pytestmark = pytest.mark.django_db(transaction=True)

TINY = {"name": "t", "pool": "cpu", "data": {"dataset": "iris"}, "model": {"name": "logreg"}, "train": {"epochs": 1}}


@pytest.fixture
def api(client, user, monkeypatch):
    monkeypatch.setattr("trainhub.jobs.services.job_enqueue", lambda job: None)
    raw = ApiToken.issue(user, "test")[1]

    class Api:
        def get(self, path):
            return client.get(path, HTTP_AUTHORIZATION=f"Bearer {raw}").json()

        def post(self, path, data):
            response = client.post(path, data, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}")
            assert response.status_code == 201, response.content
            return response.json()

    return Api()


def test_a_job_for_a_pool_without_workers_is_accepted_with_a_warning_and_says_why_it_waits(api, cpu_pool):
    created = api.post("/api/jobs", TINY)
    assert created["warning"].startswith("no worker of pool cpu is online")
    job = api.get(f"/api/jobs/{created['id']}")
    assert job["status"] == "queued"
    assert job["waiting_reason"].startswith("no worker of pool cpu is online")
    assert api.get(f"/api/jobs/{created['id']}/logs")["waiting_reason"] == job["waiting_reason"]


def test_with_a_worker_online_the_reason_is_the_place_in_the_queue(api, cpu_pool):
    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=1)
    created = api.post("/api/jobs", TINY)
    assert created["warning"] == ""
    assert api.get(f"/api/jobs/{created['id']}")["waiting_reason"] == "#1 in the queue of pool cpu"
    second = api.post("/api/jobs", TINY)
    claim_next(created["id"], 1, hostname="w@test")
    assert api.get(f"/api/jobs/{second['id']}")["waiting_reason"] == \
        "#1 in the queue of pool cpu: every worker is busy"
    assert api.get(f"/api/jobs/{created['id']}")["waiting_reason"] == ""  # running: no reason


def test_a_draining_pool_says_so(api, cpu_pool):
    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=1)
    created = api.post("/api/jobs", TINY)
    WorkerPool.objects.filter(pk=cpu_pool.pk).update(state="draining")
    assert api.get(f"/api/jobs/{created['id']}")["waiting_reason"].startswith("pool cpu is draining")


def test_the_owners_running_limit_is_named(api, cpu_pool):
    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=4)
    WorkerPool.objects.filter(pk=cpu_pool.pk).update(slots_per_worker=4, max_running_per_user=2)
    ids = [api.post("/api/jobs", TINY)["id"] for _ in range(3)]
    for job_id in ids[:2]:
        assert claim_next(job_id, 1, hostname="w@test").job is not None
    assert api.get(f"/api/jobs/{ids[2]}")["waiting_reason"].startswith(
        "your limit of 2 running job(s) in pool cpu is reached")


def test_a_job_wanting_more_gpus_than_any_host_has_says_how_many(api, user):
    pool = WorkerPool.objects.create(name="gpu", kind="gpu", queue="gpu", slots_per_worker=4)
    Worker.objects.create(hostname="g@test", pool=pool, gpu_count=2, threads=4)
    created = api.post("/api/jobs", {**TINY, "pool": "gpu", "mode": "ddp", "resources": {"gpus_per_node": 2}})
    job = Job.objects.get(pk=created["id"])
    Job.objects.filter(pk=job.pk).update(spec={**job.spec, "resources": {**job.spec["resources"], "gpus_per_node": 4}})
    assert api.get(f"/api/jobs/{job.pk}")["waiting_reason"].startswith("waiting for 4 GPUs on one host")


def test_a_backend_may_give_its_own_reason(api, cpu_pool, monkeypatch):
    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=1)
    monkeypatch.setitem(waiting.BACKEND_REASONS, "local", lambda job: "Slurm says: (Resources)")
    created = api.post("/api/jobs", TINY)
    assert api.get(f"/api/jobs/{created['id']}")["waiting_reason"] == "Slurm says: (Resources)"


def test_the_job_page_and_the_list_show_the_reason(user_client, api, cpu_pool):
    created = api.post("/api/jobs", TINY)
    page = user_client.get(f"/jobs/{created['id']}").content.decode()
    assert "no worker of pool cpu is online" in page
    assert "no worker of pool cpu is online" in user_client.get("/").content.decode()


def test_the_list_gives_each_queued_job_the_same_reason_as_its_own_page(user_client, user, api, cpu_pool,
                                                                        django_user_model):
    from trainhub.jobs.services import job_submit

    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=1)
    bob = django_user_model.objects.create_user("bob")
    for owner in (user, user, bob, user, bob):
        job_submit(owner=owner, data=TINY)
    user.is_staff = True  # the list then shows everyone's jobs
    user.save()
    listed = {j.pk: j.list_reason for j in user_client.get("/").context["jobs"]}
    assert len(listed) == 5
    assert listed == {j.pk: j.waiting_reason for j in Job.objects.filter(pk__in=listed)}
    assert sorted(listed.values())[0] == "#1 in the queue of pool cpu"


def test_a_claimed_job_its_backend_still_holds_has_one_waiting_reason_everywhere(user_client, api, cpu_pool,
                                                                                 monkeypatch):
    Worker.objects.create(hostname="w@test", pool=cpu_pool, threads=1)
    held = lambda job: "pending in Slurm (Resources), #2 in partition debug" if job.status == "running" else ""  # noqa: E731
    monkeypatch.setitem(waiting.BACKEND_REASONS, "local", held)
    created = api.post("/api/jobs", TINY)
    Job.objects.get(pk=created["id"]).transition("running")  # claimed: TrainHub's queue is behind it
    reason = "pending in Slurm (Resources), #2 in partition debug"
    assert api.get(f"/api/jobs/{created['id']}")["waiting_reason"] == reason
    assert api.get(f"/api/jobs/{created['id']}/logs")["waiting_reason"] == reason
    assert f"<b>Waiting:</b> {reason}" in user_client.get(f"/jobs/{created['id']}").content.decode()
    assert {j.pk: j.list_reason for j in user_client.get("/").context["jobs"]} == {created["id"]: reason}
    monkeypatch.setitem(waiting.BACKEND_REASONS, "local", lambda job: "")  # its processes started
    assert api.get(f"/api/jobs/{created['id']}")["waiting_reason"] == ""
    assert 'id="waiting-reason"' not in user_client.get(f"/jobs/{created['id']}").content.decode()
