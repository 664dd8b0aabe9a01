"""XSS: hostile names, spec values, log lines and metric names render as text on every page
that shows them (the job and log pages have their own tests in tests/jobs)."""
from __future__ import annotations

from html.parser import HTMLParser

import pytest

pytestmark = pytest.mark.django_db

PAYLOAD = '<script>alert(1)</script>"><b hx-get="/x" onmouseover="alert(2)">'
SHORT = '<i hx-get="/y">"x\' onclick="z'  # for fields of 40 characters or fewer


class Elements(HTMLParser):
    """What a browser would build: every start tag with its attributes, and script text."""

    def __init__(self, body: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self.feed(body)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        if self.lasttag == "script":
            self.scripts.append(data)


def assert_inert(body: str, shown: bool = True):
    """No element, attribute or script the payload asked for; and the payload is shown as text."""
    page = Elements(body)
    for tag, attrs in page.tags:
        assert "onmouseover" not in attrs and attrs.get("onclick") != "z", (tag, attrs)
        assert attrs.get("hx-get") not in ("/x", "/y"), (tag, attrs)
    # A script of the payload's own would hold just this (json_script data holds it escaped).
    assert not any(script.strip().startswith("alert(1)") for script in page.scripts)
    if shown:
        assert "alert(1)" in body or "alert(2)" in body or 'hx-get=\\"/y' in body or "/y" in body


@pytest.fixture
def hostile_job(user, cpu_pool, live_settings):
    from trainhub.jobs import logs
    from trainhub.jobs.services import job_submit

    job = job_submit(owner=user, data={"name": PAYLOAD[:100]})
    logs.LogLine.objects.bulk_create([logs.LogLine(job=job, seq=0, rank=0, stream="o", text=f"boom {PAYLOAD}")])
    logs.record_metrics(job.pk, 1, {"loss": 0.5})
    return job


def test_the_templates_page_shows_hostile_names_and_spec_values_as_text(user_client, user, cpu_pool):
    from trainhub.jobs.job_templates import template_save

    template_save(owner=user, name=PAYLOAD[:100], spec={"name": "t", "train": {"optimizer": "adamw"},
                                                        "script": None} | {"name": PAYLOAD[:100]},
                  description=PAYLOAD)
    body = user_client.get("/templates/").content.decode()
    assert "alert(1)" in body
    assert_inert(body)


def test_the_pools_pages_show_hostile_descriptions_hosts_and_job_names_as_text(client, django_user_model,
                                                                               cpu_pool, hostile_job):
    from trainhub.pools.models import Worker

    cpu_pool.description = PAYLOAD
    cpu_pool.save()
    Worker.objects.create(pool=cpu_pool, hostname=PAYLOAD, info={"cpu": PAYLOAD})
    client.force_login(django_user_model.objects.create_user("root", password="staff-pw-123", is_staff=True))
    assert_inert(client.get("/pools/").content.decode(), shown=False)  # the list shows no descriptions
    assert_inert(client.get("/pools/cpu").content.decode())
    assert_inert(client.get("/pools/cpu", HTTP_HX_REQUEST="true").content.decode())


def test_log_search_results_and_the_echoed_query_are_text(user_client, hostile_job):
    from urllib.parse import quote

    for query in ("boom", PAYLOAD):
        response = user_client.get(f"/jobs/{hostile_job.pk}/logs/search?q={quote(query)}", HTTP_HX_REQUEST="true")
        assert response.status_code == 200
        assert_inert(response.content.decode())


def test_the_job_list_search_echo_is_text(user_client, hostile_job):
    from urllib.parse import quote

    assert_inert(user_client.get(f"/?q={quote(PAYLOAD)}").content.decode())
    assert_inert(user_client.get(f"/?q={quote(PAYLOAD)}", HTTP_HX_REQUEST="true").content.decode())


def test_the_compare_page_shows_hostile_job_and_metric_names_as_text(user_client, hostile_job):
    from trainhub.jobs import logs

    logs.record_metrics(hostile_job.pk, 2, {PAYLOAD[:60]: 1.0})
    for metric in ("loss", PAYLOAD[:60]):
        from urllib.parse import quote

        body = user_client.get(f"/jobs/compare?ids={hostile_job.pk}&metric={quote(metric)}").content.decode()
        assert_inert(body)
        assert "</script><script>" not in body  # json_script cannot be closed early


def test_the_tokens_page_shows_hostile_token_names_as_text(user_client):
    created = user_client.post("/tokens/", {"name": PAYLOAD[:100]})
    assert created.status_code == 201
    assert_inert(created.content.decode())
    assert_inert(user_client.get("/tokens/").content.decode())


def test_the_new_job_form_echoes_hostile_spec_keys_and_values_as_text(user_client, cpu_pool):
    text = f"name: ok\n'{PAYLOAD}': 1\ntrain: {{optimizer: '{PAYLOAD}'}}\n"
    # real actions of the form (there is no action "validate"; inline validation is ?validate=1)
    response = user_client.post("/jobs/new", {"spec_yaml": text, "action": "to_form"})
    assert response.status_code == 422
    assert_inert(response.content.decode())
    response = user_client.post("/jobs/new?validate=1", {"spec_yaml": text}, HTTP_HX_REQUEST="true")
    assert_inert(response.content.decode())
    response = user_client.post("/jobs/new", {"spec_yaml": text}, HTTP_HX_REQUEST="true")
    assert_inert(response.content.decode())
