"""The API against its own OpenAPI schema (schemathesis): generated requests never get a 500,
and responses match the documented shapes. Runs in-process on the Django WSGI app."""
import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed (requirements-dev.txt)")
from django.core.wsgi import get_wsgi_application  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

from trainhub.api.models import ApiToken  # noqa: E402

schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())


@pytest.fixture
def auth(db, cpu_pool, django_user_model, monkeypatch):
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    monkeypatch.setattr("trainhub.jobs.services.job_enqueue", lambda job: None)  # no broker needed
    # as Django's test client does: keep the test's connection (and its transaction) open between requests
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    user = django_user_model.objects.create_user("fuzz")
    yield {"Authorization": f"Bearer {ApiToken.issue(user)[1]}"}
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_honours_its_schema(case, auth):
    # A spec is checked by meaning (unknown keys, combinations), so schema-valid bodies may be refused: skip
    # only that check; everything else (no 5xx, documented statuses and shapes) holds.
    case.call_and_validate(headers=auth, excluded_checks=[schemathesis.checks.positive_data_acceptance])
