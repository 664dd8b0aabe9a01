"""Access: every page and endpoint needs a login; nobody reaches another user's jobs; pools,
workers and the admin are staff-only. The URL map is walked, so a new view is covered."""
from __future__ import annotations

import pytest

from tests.security.conftest import fill, routes

pytestmark = pytest.mark.django_db

# Reachable without a login, each for a reason (docs/SECURITY.md).
PUBLIC = {
    "login", "admin/login/",      # the log-in form itself
    "logout",                     # POST only; logs out whoever asks
    "api/openapi.json", "api/docs",  # the published API contract, no data
    "api/<path:rest>",            # 404 JSON for unknown API paths, for everyone
    "favicon.ico",                # a redirect to the static icon
}
# Answers anonymous with 403, not a redirect: an EventSource cannot follow one to a form.
STREAMS = {"jobs/<int:job_id>/logs/stream"}


def page_routes():
    for route, pattern in routes():
        if route in PUBLIC or route.startswith(("api/", "^api/")) or route.startswith("admin/"):
            continue
        yield route


def api_operations():
    from trainhub.api.views import api

    for path, item in api.get_openapi_schema()["paths"].items():
        for method in item:
            yield method.upper(), path


def login_redirect(response) -> bool:
    return response.status_code == 302 and response["Location"].split("?")[0] in ("/login", "/admin/login/")


def test_the_walk_finds_the_pages_and_endpoints_we_know():
    pages = set(page_routes())
    assert {"", "jobs/new", "jobs/<int:job_id>", "jobs/<int:job_id>/logs/download", "tokens/", "pools/",
            "templates/", "jobs/compare"} <= pages
    assert ("POST", "/api/jobs/{job_id}/cancel") in set(api_operations())


def test_anonymous_gets_a_login_redirect_on_every_page(client, bobs_things):
    for route in page_routes():
        url = fill(route, bobs_things)
        for method in (client.get, client.post):
            response = method(url)
            if route in STREAMS:
                assert response.status_code in (401, 403), (url, response.status_code)
            else:
                # 405 is a POST-only view refusing GET before it looks at the user.
                assert login_redirect(response) or response.status_code == 405, (method, url, response.status_code)


def test_anonymous_gets_401_from_every_api_endpoint(client, bobs_things):
    for method, path in api_operations():
        if path in ("/api/openapi.json", "/api/docs"):
            continue
        url = path.replace("{job_id}", str(bobs_things["job_id"])).replace(
            "{template_id}", str(bobs_things["template_id"])).replace("{path}", "stdout.log")
        response = client.generic(method, url, "{}", content_type="application/json")
        assert response.status_code == 401, (method, url, response.status_code)
        response = client.generic(method, url, "{}", content_type="application/json",
                                  HTTP_AUTHORIZATION="Bearer not-a-token")
        assert response.status_code == 401, (method, url, "bad token")


def test_anonymous_gets_a_login_redirect_from_the_admin(client, bobs_things):
    from django.contrib import admin

    urls = ["/admin/", "/admin/password_change/", "/admin/jobs/"]
    urls += [f"/admin/{m._meta.app_label}/{m._meta.model_name}/" for m in admin.site._registry]
    for url in urls:
        assert login_redirect(client.get(url)), url


def test_a_user_gets_404_for_every_page_of_another_users_job(transactional_db, user_client, bobs_things):
    """transactional_db: the live log stream reads the session, the user and the job in the server's
    shared threads (trainhub/jobs/views/aiodb.py), on connections of their own, which see only committed
    rows; in a test's open transaction it would find no session and answer 403 for a reason of its own."""
    from trainhub.jobs.models import Job

    for route in page_routes():
        if not any(f"<int:{k}>" in route for k in ("job_id", "template_id", "token_id")):
            continue
        url = fill(route, bobs_things)
        for method in (user_client.get, user_client.post):
            response = method(url)
            assert response.status_code in (404, 405), (method, url, response.status_code)
        assert user_client.get(url, HTTP_HX_REQUEST="true").status_code in (404, 405), url
    assert Job.objects.get(pk=bobs_things["job_id"]).status == "queued"


def test_a_users_lists_search_and_compare_never_show_another_users_job(user_client, bobs_things):
    job_id = bobs_things["job_id"]
    for url in ("/", "/?q=bobs", "/?status=queued", f"/jobs/compare?ids={job_id}", "/templates/", "/tokens/"):
        body = user_client.get(url).content.decode()
        assert "bobs-secret-job" not in body and "bobs-template" not in body and "bobs-token" not in body, url


def test_a_users_api_token_gets_404_for_every_endpoint_of_another_users_job(user, bobs_things, client):
    from trainhub.api.models import ApiToken
    from trainhub.jobs.models import Job

    _, raw = ApiToken.issue(user, "alice")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    for method, path in api_operations():
        if "{job_id}" not in path and "{template_id}" not in path:
            continue
        url = path.replace("{job_id}", str(bobs_things["job_id"])).replace(
            "{template_id}", str(bobs_things["template_id"])).replace("{path}", "stdout.log")
        response = client.generic(method, url, "{}", content_type="application/json", **auth)
        assert response.status_code == 404, (method, url, response.status_code)
    listed = client.get("/api/jobs", **auth).json()
    assert "bobs-secret-job" not in str(listed)
    assert Job.objects.get(pk=bobs_things["job_id"]).status == "queued"


def test_pools_pages_and_the_admin_are_staff_only(user_client, bobs_things):
    for route in page_routes():
        if route.startswith("pools/"):
            url = fill(route, bobs_things)
            assert login_redirect(user_client.get(url)) or user_client.get(url).status_code == 405, url
            assert login_redirect(user_client.post(url, {"state": "disabled"})), url
    assert login_redirect(user_client.get("/admin/"))
    from trainhub.pools.models import WorkerPool

    assert WorkerPool.objects.get(name="cpu").state == "enabled"


def test_staff_reach_pools_pages_and_the_admin(client, staff, bobs_things):
    client.force_login(staff)
    assert client.get("/pools/").status_code == 200
    assert client.get("/pools/cpu").status_code == 200
    assert client.get("/admin/").status_code == 200


def test_workers_and_queues_in_the_api_are_staff_only(client, user, staff, cpu_pool, bobs_things):
    from trainhub.api.models import ApiToken
    from trainhub.pools.models import Worker

    Worker.objects.create(pool=cpu_pool, hostname="gpu-host-secret")
    for who, sees in ((user, False), (staff, True)):
        _, raw = ApiToken.issue(who, "t")
        pools = client.get("/api/pools", HTTP_AUTHORIZATION=f"Bearer {raw}").json()
        assert ("gpu-host-secret" in str(pools)) is sees, who
        assert all(bool(p.get("queue")) is sees for p in pools), who
