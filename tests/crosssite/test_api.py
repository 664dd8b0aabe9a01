"""A cross-site job is submitted through the API like any other; a bad site is refused by field name."""
import pytest

from tests.api.conftest import api, no_enqueue, token  # noqa: F401 - the API fixtures
from trainhub.jobs.models import Job
from trainhub.jobs.services import job_enqueue
from trainhub.pools.models import WorkerPool

SPEC = {"name": "two-sites", "mode": "ddp", "sites": [{"pool": "lab-a"}, {"pool": "cloud-b"}],
        "sync": {"algorithm": "diloco", "every": 10}, "train": {"max_steps": 100}}


@pytest.fixture
def two_pools(db):
    return [WorkerPool.objects.create(name=p, kind="cpu", queue=f"q-{p}") for p in ("lab-a", "cloud-b")]


def test_the_api_takes_a_cross_site_job_and_keeps_its_sites_and_sync(api, two_pools, no_enqueue):  # noqa: F811
    created = api.post("/api/jobs", SPEC)
    assert created.status_code == 201, created.json()
    job = Job.objects.get(pk=created.json()["id"])
    assert job.pool.name == "lab-a"
    assert [s.pool for s in job.spec_model.sites] == ["lab-a", "cloud-b"]
    assert job.spec_model.sync.every == 10


def test_a_site_on_a_missing_pool_is_refused_by_its_field(api, two_pools, no_enqueue):  # noqa: F811
    response = api.post("/api/jobs", {**SPEC, "sites": [{"pool": "lab-a"}, {"pool": "nowhere"}]})
    assert response.status_code == 422
    assert "no pool named 'nowhere'" in response.json()["errors"]["sites.1.pool"]


def test_a_site_on_a_pool_of_other_groups_is_refused_by_its_field_until_the_user_joins_one(
        api, user, two_pools, no_enqueue):  # noqa: F811
    from django.contrib.auth.models import Group

    team = Group.objects.create(name="cloud-team")
    two_pools[1].groups.add(team)
    response = api.post("/api/jobs", SPEC)
    assert response.status_code == 422
    assert response.json()["errors"] == {"sites.1.pool": "pool 'cloud-b' does not take your jobs now; "
                                                         "choose another pool"}
    user.groups.add(team)
    assert api.post("/api/jobs", SPEC).status_code == 201


def test_a_cross_site_job_is_announced_on_every_sites_queue(api, two_pools, no_enqueue, monkeypatch):  # noqa: F811
    job = Job.objects.get(pk=api.post("/api/jobs", SPEC).json()["id"])
    sent = []
    from workers.app import app

    class Result:
        id = "task"
    monkeypatch.setattr(app, "send_task", lambda name, args, queue: sent.append(queue) or Result())
    job_enqueue(job)
    assert sorted(sent) == ["q-cloud-b", "q-lab-a"]


def test_the_new_job_pages_yaml_tab_submits_a_cross_site_job_and_names_a_bad_sync(user_client, two_pools, no_enqueue):  # noqa: F811
    import yaml

    bad = user_client.post("/jobs/new", {"action": "submit", "spec_yaml": yaml.safe_dump({**SPEC, "train": {"max_steps": 15}})})
    assert bad.status_code == 422 and b"multiple of" in bad.content and b"train.max_steps" in bad.content
    good = user_client.post("/jobs/new", {"action": "submit", "spec_yaml": yaml.safe_dump(SPEC)})
    assert good.status_code == 302
    assert [s.pool for s in Job.objects.get().spec_model.sites] == ["lab-a", "cloud-b"]


def test_a_site_on_a_slurm_pool_is_taken_and_is_one_place_however_many_nodes_slurm_gives_it(
        api, two_pools, no_enqueue):  # noqa: F811
    from trainhub.runs import crosssite
    from trainhub.runs.scheduling import needs

    WorkerPool.objects.create(name="hpc", kind="slurm", queue="q-hpc")
    sites = [{"pool": "lab-a", "nodes": 2}, {"pool": "hpc", "nodes": 2}, {"pool": "cloud-b", "nodes": 2}]
    created = api.post("/api/jobs", {**SPEC, "sites": sites})
    assert created.status_code == 201, created.json()
    job = Job.objects.get(pk=created.json()["id"])
    # its worker submits the whole site as one Slurm job: one place, between lab-a's two and cloud-b's two
    assert crosssite.places(job.spec_model) == [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1)]
    assert needs(job)[0] == 5


def test_each_site_runs_under_its_own_pools_sandbox_setting(two_pools, user, tmp_path, no_enqueue):  # noqa: F811
    from trainhub.jobs.services import job_submit
    from workers import crosssite

    lab_a, cloud_b = two_pools
    lab_a.sandbox, cloud_b.sandbox = "required", "off"
    lab_a.save(update_fields=["sandbox"])
    cloud_b.save(update_fields=["sandbox"])
    job = job_submit(owner=user, data=SPEC)
    sandboxes = [crosssite._request(job, site, tmp_path / f"site{site}", "job.yaml", {}, {}).sandbox
                 for site in (0, 1)]
    assert sandboxes == ["required", "off"]  # not site 0's pool's setting for both


def test_the_api_job_has_each_sites_row_as_the_sites_panel_shows_it(api, user, two_pools, no_enqueue):  # noqa: F811
    from tests.crosssite import sites
    from trainhub.runs.models import GangMember

    job = sites.running_job(user)
    GangMember.objects.filter(job=job, node_rank=1).update(site_state="lost", restarts=1)
    rows = api.get(f"/api/jobs/{job.pk}").json()["sites"]
    assert [(r["pool"], r["state"], r["restarts"], r["max_restarts"], r["outer_step"], r["participants"])
            for r in rows] == [("lab-a", "running", 0, 1, 1, 2),
                               ("cloud-b", "lost, waiting for another worker of its pool", 1, 1, 1, 2)]
    assert rows[0]["bytes"] == 4096 and rows[0]["last_sync_seconds"] == 0.25
    single = api.post("/api/jobs", {"name": "one pool", "pool": "lab-a", "train": {"epochs": 1}}).json()["id"]
    assert api.get(f"/api/jobs/{single}").json()["sites"] == []
