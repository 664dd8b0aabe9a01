import pytest

from trainhub.jobs.models import Job, JobEvent
from trainhub.jobs.services import job_submit


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob", password="another-secret-pw")


@pytest.fixture
def queued(user, cpu_pool, live_settings):
    return job_submit(owner=user, data={"name": "mine"})


def test_pages_need_a_login(client, db):
    for url in ("/", "/jobs/new", "/jobs/1"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login")


def test_a_user_sees_only_their_own_jobs(client, bob, queued):
    client.force_login(bob)
    assert b"mine" not in client.get("/").content
    assert client.get(f"/jobs/{queued.pk}").status_code == 404
    assert client.post(f"/jobs/{queued.pk}/cancel").status_code == 404
    assert Job.objects.get(pk=queued.pk).status == "queued"


def test_staff_see_everyones_jobs(client, queued, django_user_model):
    staff = django_user_model.objects.create_user("root", password="staff-secret-pw", is_staff=True)
    client.force_login(staff)
    assert b"mine" in client.get("/").content
    assert client.get(f"/jobs/{queued.pk}").status_code == 200


def test_cancelling_a_queued_job_cancels_it_at_once_and_twice_is_harmless(user_client, queued, user):
    assert user_client.post(f"/jobs/{queued.pk}/cancel").status_code == 302
    assert user_client.post(f"/jobs/{queued.pk}/cancel").status_code == 302
    queued.refresh_from_db()
    assert queued.status == "cancelled"
    event = JobEvent.objects.get(job=queued, new="cancelled")
    assert event.actor == user and event.old == "queued"


def test_cancel_refuses_get(user_client, queued):
    assert user_client.get(f"/jobs/{queued.pk}/cancel").status_code == 405


def test_a_hostile_job_name_is_shown_as_text(user_client, user, cpu_pool, live_settings):
    job = job_submit(owner=user, data={"name": '<script>alert(1)</script><b hx-get="/x">'})
    for url in ("/", f"/jobs/{job.pk}"):
        body = user_client.get(url).content
        assert b"<script>alert(1)" not in body and b'<b hx-get="/x">' not in body
        assert b"&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_the_job_list_pages_backwards_by_id(user_client, user, cpu_pool, live_settings):
    jobs = [job_submit(owner=user, data={"name": f"job-{i:03d}"}) for i in range(55)]
    first = user_client.get("/")
    assert first.context["next_before"] == jobs[5].pk
    second = user_client.get(f"/?before={first.context['next_before']}")
    names = [j.name for j in second.context["jobs"]]
    assert names == [f"job-{i:03d}" for i in range(4, -1, -1)]
    assert second.context["next_before"] is None


def test_the_status_fragment_renders_alone_for_a_live_update(user_client, queued):
    response = user_client.get(f"/jobs/{queued.pk}?fragment=status", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert b'id="job-status"' in response.content and b"<html" not in response.content
    assert user_client.get(f"/jobs/{queued.pk}?fragment=nope").status_code == 404
