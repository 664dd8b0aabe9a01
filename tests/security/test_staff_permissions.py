"""Staff see every job and pool, but change only what their Django permissions allow: without
``pools.change_workerpool`` no pool is drained, disabled or emptied; without ``jobs.change_job`` no
other user's job is cancelled — from the pool page, the job page, the bulk action, the API or the
admin's actions. With the permissions (or as a superuser) each works."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission


@pytest.fixture
def bobs_job(bob, cpu_pool):
    from trainhub.jobs.models import Job

    return Job.submit(owner=bob, name="bobs", mode="centralized", spec={"name": "bobs"}, pool=cpu_pool)


def grant(user, *codenames):
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return type(user).objects.get(pk=user.pk)  # a fresh object: permissions are cached per instance


def status(job) -> str:
    job.refresh_from_db()
    return job.status


def every_way_to_change(client, cpu_pool, job) -> list[int]:
    from trainhub.api.models import ApiToken

    staff = type(job.owner).objects.get(pk=int(client.session["_auth_user_id"]))
    _, secret = ApiToken.issue(staff, "t")
    return [
        client.post("/pools/cpu/state", {"state": "disabled"}).status_code,
        client.post("/pools/cpu/cancel").status_code,
        client.post(f"/jobs/{job.pk}/cancel").status_code,
        client.post(f"/api/jobs/{job.pk}/cancel", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code,
        client.post("/jobs/", {"action": "cancel", "ids": [job.pk]}).status_code,
        client.post("/admin/pools/workerpool/", {"action": "disable", "_selected_action": [cpu_pool.pk]}).status_code,
        client.post("/admin/pools/workerpool/", {"action": "cancel_jobs",
                                                 "_selected_action": [cpu_pool.pk]}).status_code,
    ]


def test_staff_without_permissions_see_but_cannot_disable_pools_or_cancel_other_users_jobs(
        client, staff, cpu_pool, bobs_job):
    client.force_login(grant(staff, "view_workerpool", "view_job"))  # the admin lists pools, offers no action
    assert client.get(f"/jobs/{bobs_job.pk}").status_code == 200 and client.get("/pools/cpu").status_code == 200
    codes = every_way_to_change(client, cpu_pool, bobs_job)
    assert codes[:4] == [403, 403, 403, 403], codes  # the bulk cancel and the admin skip what is not allowed
    cpu_pool.refresh_from_db()
    assert cpu_pool.state == "enabled" and status(bobs_job) == "queued"


def test_staff_with_the_permissions_and_superusers_may(client, staff, cpu_pool, bobs_job, django_user_model):
    staff = grant(staff, "change_workerpool", "change_job", "view_workerpool")
    client.force_login(staff)
    assert client.post(f"/jobs/{bobs_job.pk}/cancel").status_code == 302 and status(bobs_job) == "cancelled"
    assert client.post("/pools/cpu/state", {"state": "disabled"}).status_code == 302
    cpu_pool.refresh_from_db()
    assert cpu_pool.state == "disabled"
    root = django_user_model.objects.create_superuser("boss", password="boss-secret-pw-1")
    client.force_login(root)
    assert client.post("/pools/cpu/state", {"state": "enabled"}).status_code == 302


def test_a_staff_user_may_cancel_their_own_jobs_without_any_permission(client, staff, cpu_pool):
    from trainhub.jobs.models import Job

    own = Job.submit(owner=staff, name="mine", mode="centralized", spec={"name": "mine"}, pool=cpu_pool)
    client.force_login(staff)
    assert client.post(f"/jobs/{own.pk}/cancel").status_code == 302 and status(own) == "cancelled"
