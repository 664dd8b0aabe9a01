"""Fixtures of the log storage tests (tests/jobs/test_log_search.py, tests/jobs/test_log_store.py)."""
import pytest

from trainhub.jobs import logs
from trainhub.jobs.models import Job


@pytest.fixture
def redis_unreachable(settings):
    """Publishing lines live is best effort; these tests count what the database holds."""
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    logs.redis_client.cache_clear()
    yield
    logs.redis_client.cache_clear()


@pytest.fixture
def running_job(redis_unreachable, user, cpu_pool):
    """A running job whose lines a test stores through ``logs.append_lines``."""
    return Job.objects.create(owner=user, name="logs", mode="centralized", pool=cpu_pool, status="running", spec={})
