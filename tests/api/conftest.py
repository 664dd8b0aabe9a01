import pytest

from trainhub.api.models import ApiToken


@pytest.fixture
def token(user):
    return ApiToken.issue(user, "test")[1]


@pytest.fixture
def api(client, token):
    """The Django test client with alice's bearer token on every request."""

    class Api:
        def get(self, path, **kw):
            return client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}", **kw)

        def post(self, path, data=None, raw=None, **kw):
            body = raw if raw is not None else data
            return client.post(path, body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}", **kw)

        def delete(self, path):
            return client.delete(path, HTTP_AUTHORIZATION=f"Bearer {token}")

    return Api()


@pytest.fixture
def no_enqueue(monkeypatch):
    """Jobs stay queued: these tests check the API, not the worker."""
    sent = []
    monkeypatch.setattr("trainhub.jobs.services.job_enqueue", lambda job: sent.append(job.pk))
    return sent
