"""The new-job form's hidden ``extra`` field is the client's to forge: a value where a section belongs,
JSON nested past the parser's depth, or a list instead of a mapping get a page naming the problem,
never a 500 — on submit, on the inline check (``?validate=1``) and on the switch to the YAML tab."""
from __future__ import annotations

import pytest

from tests.api.test_new_job_form import FORM

HOSTILE = {
    "value where a section belongs": '{"train": 5}',
    "a list for a section": '{"resources": [1, 2]}',
    "a string for a section": '{"data": "digits"}',
    "nested past the parser": "[" * 100_000 + "]" * 100_000,
    "a nested object past the parser": '{"a":' * 50_000 + "1" + "}" * 50_000,
}


@pytest.mark.parametrize("extra", HOSTILE.values(), ids=HOSTILE.keys())
@pytest.mark.parametrize("action", ["submit", "validate", "to_yaml"])
def test_a_forged_extra_field_is_refused_with_a_message_not_a_500(user_client, cpu_pool, extra, action):
    from trainhub.jobs.models import Job

    url = "/jobs/new?validate=1" if action == "validate" else "/jobs/new"
    data = {**FORM, "extra": extra}
    if action == "to_yaml":
        data["action"] = "to_yaml"
    response = user_client.post(url, data)
    assert response.status_code in (200, 422), response.status_code
    html = response.content.decode()
    assert "not a JSON mapping" in html or "must be a section of keys" in html
    assert Job.objects.count() == 0
