"""Templates (save, list, start a job from one) and the read-only pools list."""
import pytest

from trainhub.pools.models import Worker, WorkerPool

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = {"name": "digits-mlp", "pool": "cpu", "train": {"epochs": 2}}


def test_a_saved_template_starts_jobs_with_overrides(api, cpu_pool, no_enqueue):
    created = api.post("/api/templates", {"name": "digits", "spec": SPEC, "description": "quick"})
    assert created.status_code == 201, created.content
    template = created.json()
    assert template["spec"]["train"]["epochs"] == 2 and template["spec"]["train"]["lr"] == 0.001
    assert [t["name"] for t in api.get("/api/templates").json()] == ["digits"]
    started = api.post(f"/api/templates/{template['id']}/jobs", {"train": {"epochs": 5}})
    assert started.status_code == 201, started.content
    job = api.get(f"/api/jobs/{started.json()['id']}").json()
    assert job["spec"]["train"]["epochs"] == 5 and job["spec"]["train"]["lr"] == 0.001


def test_a_template_with_a_bad_spec_or_a_taken_name_is_refused(api, cpu_pool):
    bad = api.post("/api/templates", {"name": "x", "spec": {"train": {"lr": "fast"}}})
    assert bad.status_code == 422 and "train.lr" in bad.json()["errors"]
    assert api.post("/api/templates", {"name": "x", "spec": SPEC}).status_code == 201
    taken = api.post("/api/templates", {"name": "x", "spec": SPEC})
    assert taken.status_code == 422 and "template.name" in taken.json()["errors"]
    assert api.post("/api/templates", {"name": "x", "spec": SPEC, "replace": True}).status_code == 201
    missing = api.post("/api/templates", {"spec": SPEC})
    assert missing.status_code == 422 and "name" in missing.json()["errors"]


def test_other_users_templates_are_invisible(api, cpu_pool, django_user_model):
    from trainhub.jobs.models import JobTemplate

    bob = django_user_model.objects.create_user("bob")
    theirs = JobTemplate.objects.create(owner=bob, name="bobs", spec=SPEC)
    assert api.get("/api/templates").json() == []
    assert api.get(f"/api/templates/{theirs.pk}").status_code == 404
    assert api.post(f"/api/templates/{theirs.pk}/jobs", {}).status_code == 404
    assert api.delete(f"/api/templates/{theirs.pk}").status_code == 404


def test_pools_show_load_and_hide_workers_and_disabled_pools_from_non_staff(api, cpu_pool, user):
    WorkerPool.objects.create(name="retired", queue="retired", enabled=False)
    Worker.objects.create(hostname="w1@host", pool=cpu_pool)
    pools = api.get("/api/pools").json()
    assert [p["name"] for p in pools] == ["cpu"]
    assert pools[0]["workers_online"] == 1 and pools[0]["workers"] is None and pools[0]["queue"] is None
    assert pools[0]["state"] == "enabled" and pools[0]["may_submit"] is True
    user.is_staff = True
    user.save()
    pools = api.get("/api/pools").json()
    assert [p["name"] for p in pools] == ["cpu", "retired"]
    assert pools[0]["workers"][0]["hostname"] == "w1@host" and pools[0]["queue"] == "cpu"


def test_non_staff_do_not_see_pools_reserved_for_other_groups(api, cpu_pool):
    from django.contrib.auth.models import Group

    reserved = WorkerPool.objects.create(name="vision-gpus", queue="vision", kind="gpu")
    reserved.groups.add(Group.objects.create(name="vision"))
    assert [p["name"] for p in api.get("/api/pools").json()] == ["cpu"]
