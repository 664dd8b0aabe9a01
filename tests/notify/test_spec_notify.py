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
