"""The spec's optional ``notify`` section is checked like every other section."""
import pytest

from workers.runner.config import SpecError, parse_spec


def test_a_notify_section_is_accepted_and_kept():
    spec = parse_spec({"notify": {"webhook": "https://hooks.example.test/x", "email": True, "on": ["failed"]}})
    assert spec.to_dict()["notify"] == {"webhook": "https://hooks.example.test/x", "email": True, "on": ["failed"]}


@pytest.mark.parametrize("notify,field", [
    ({"webhook": "file:///etc/passwd"}, "notify.webhook"),
    ({"webhook": "javascript:alert(1)"}, "notify.webhook"),
    ({"webhook": "http://hooks.test/a\r\nX-Injected: 1"}, "notify.webhook"),
    ({"webhook": "http://hooks.test/a b"}, "notify.webhook"),
    ({"hook": "https://x.test"}, "notify.hook"),
    ({"on": ["running"]}, "notify.on.0"),
    ({"email": "maybe"}, "notify.email"),
])
def test_bad_notify_sections_are_refused_by_field(notify, field):
    with pytest.raises(SpecError) as caught:
        parse_spec({"notify": notify})
    assert field in caught.value.errors


def test_the_api_refuses_a_non_http_webhook_with_the_field_named(user_client, cpu_pool):
    response = user_client.post("/api/jobs", {"notify": {"webhook": "ftp://x.test/h"}}, content_type="application/json")
    assert response.status_code == 422
    assert "http://" in response.json()["errors"]["notify.webhook"]


DOCUMENTED = """name: notify-me
notify:
  webhook: https://hooks.example.com/trainhub   # "" = no webhook for this job
  email: true                                   # false = no e-mail for this job
  on: [failed, cancelled]                       # which final statuses notify
"""


def test_the_documented_notify_block_is_accepted_though_yaml_reads_on_as_true():
    from workers.runner.config import load_text

    assert parse_spec(load_text(DOCUMENTED)).notify.on == ["failed", "cancelled"]


def test_the_documented_notify_block_submitted_in_the_yaml_tab_is_stored_with_its_on_key(user_client, cpu_pool):
    from trainhub.jobs.models import Job

    response = user_client.post("/jobs/new", {"spec_yaml": DOCUMENTED})
    assert response.status_code == 302, response.content.decode()[:2000]
    job = Job.objects.get(name="notify-me")
    assert job.spec["notify"]["on"] == ["failed", "cancelled"]
    assert job.spec_model.notify.on == ["failed", "cancelled"]


def test_a_key_that_yaml_reads_as_false_gets_a_message_naming_the_keys():
    from workers.runner.config import load_text

    with pytest.raises(SpecError) as caught:
        parse_spec(load_text("notify:\n  off: [failed]\n"))
    assert "the keys are webhook, email and on" in caught.value.errors["notify"]
