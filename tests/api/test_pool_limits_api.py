"""A pool's per-user submit limits, refused through the API by field name with the pool's limit."""
import pytest

from trainhub.pools.models import WorkerPool

TINY = {"name": "t", "data": {"dataset": "iris"}, "model": {"name": "logreg"}, "train": {"epochs": 1}}


@pytest.fixture
def limited(cpu_pool):
    WorkerPool.objects.filter(pk=cpu_pool.pk).update(max_priority=20, max_timeout_minutes=60, max_restarts_limit=3,
                                                     max_queued_per_user=2)


@pytest.mark.parametrize("field, value, limit", [("priority", 21, "20"), ("timeout_minutes", 61, "60"),
                                                 ("max_restarts", 4, "3")])
def test_each_submit_limit_is_refused_by_name(api, limited, no_enqueue, field, value, limit):
    response = api.post("/api/jobs", {**TINY, field: value})
    assert response.status_code == 422
    message = response.json()["errors"][field]
    assert limit in message and "'cpu'" in message
    assert api.post("/api/jobs", {**TINY, field: int(limit)}).status_code == 201


def test_the_queued_jobs_limit_is_refused_by_name(api, limited, no_enqueue):
    assert [api.post("/api/jobs", TINY).status_code for _ in range(2)] == [201, 201]
    response = api.post("/api/jobs", TINY)
    assert response.status_code == 422 and "max_queued_per_user = 2" in response.json()["errors"]["pool"]


def test_the_default_limits_cap_priority_at_50_and_restarts_at_5(api, cpu_pool, no_enqueue):
    assert api.post("/api/jobs", {**TINY, "priority": 51}).status_code == 422
    assert "up to 5 restarts" in api.post("/api/jobs", {**TINY, "max_restarts": 6}).json()["errors"]["max_restarts"]


def test_staff_may_exceed_every_limit(api, user, limited, no_enqueue):
    user.is_staff = True
    user.save()
    for _ in range(3):
        response = api.post("/api/jobs", {**TINY, "priority": 90, "timeout_minutes": 600, "max_restarts": 10})
        assert response.status_code == 201, response.content
