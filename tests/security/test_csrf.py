"""CSRF: every state-changing request from a browser session needs the token, htmx ones too
(base.html sends it as X-CSRFToken via hx-headers); Bearer-token API calls need none."""
from __future__ import annotations

import pytest
from django.test import Client

from tests.security.conftest import fill, routes, things_of

pytestmark = pytest.mark.django_db

SPEC = {"name": "csrf-job", "pool": "cpu"}


@pytest.fixture
def browser(staff):
    from django.contrib.auth.models import Permission

    staff.user_permissions.add(Permission.objects.get(codename="change_workerpool"))  # the pool page's actions
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    client.get("/")  # sets the csrftoken cookie, as any page does
    return client


@pytest.fixture
def own_things(staff, cpu_pool, live_settings):
    return things_of(staff, cpu_pool, "own", "own-template", "t", "own-token")


def token(client) -> str:
    return client.cookies["csrftoken"].value


def test_every_post_without_the_token_is_refused_with_403(browser, own_things):
    from trainhub.jobs.models import Job

    checked = 0
    for route, _ in routes():
        url = fill(route, own_things)
        if url is None or route.startswith("api/"):
            continue
        for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
            response = browser.post(url, {"state": "disabled", "name": "x"}, **headers)
            assert response.status_code == 403, (url, headers, response.status_code)
        checked += 1
    assert checked >= 10
    assert Job.objects.get(pk=own_things["job_id"]).status == "queued"


def test_htmx_posts_with_the_header_from_base_html_pass(browser, own_things):
    from trainhub.api.models import ApiToken
    from trainhub.jobs.models import Job

    assert '"X-CSRFToken": "' in browser.get("/").content.decode()  # the header htmx sends
    headers = {"HTTP_HX_REQUEST": "true", "HTTP_X_CSRFTOKEN": token(browser)}
    assert browser.post("/tokens/", {"name": "laptop"}, **headers).status_code == 201
    assert browser.post(f"/tokens/{own_things['token_id']}/revoke", **headers).status_code == 302
    assert ApiToken.objects.get(pk=own_things["token_id"]).revoked_at is not None
    assert browser.post(f"/jobs/{own_things['job_id']}/cancel", **headers).status_code in (200, 302)
    assert Job.objects.get(pk=own_things["job_id"]).status == "cancelled"
    assert browser.post("/pools/cpu/state", {"state": "draining"}, **headers).status_code == 302


def test_a_form_post_with_the_hidden_field_passes(browser, own_things):
    response = browser.post(f"/templates/{own_things['template_id']}/delete",
                            {"csrfmiddlewaretoken": token(browser)})
    assert response.status_code == 302


def test_a_wrong_token_is_refused(browser, own_things):
    response = browser.post("/tokens/", {"name": "x"}, HTTP_X_CSRFTOKEN="A" * 32)
    assert response.status_code == 403


def test_session_api_calls_need_the_token(browser, own_things):
    refused = browser.post("/api/jobs", SPEC, content_type="application/json")
    assert refused.status_code == 403
    passed = browser.post("/api/jobs", SPEC, content_type="application/json", HTTP_X_CSRFTOKEN=token(browser))
    assert passed.status_code == 201
    assert browser.delete(f"/api/templates/{own_things['template_id']}").status_code == 403


def test_bearer_token_api_calls_need_no_csrf_token(staff, own_things):
    from trainhub.api.models import ApiToken

    _, raw = ApiToken.issue(staff, "ci")
    client = Client(enforce_csrf_checks=True)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert client.post("/api/jobs", SPEC, content_type="application/json", **auth).status_code == 201
    job_id = client.get("/api/jobs", **auth).json()["items"][0]["id"]
    assert client.post(f"/api/jobs/{job_id}/cancel", **auth).status_code == 200
    assert client.delete(f"/api/templates/{own_things['template_id']}", **auth).status_code == 204
