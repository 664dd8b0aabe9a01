"""What a pool's settings refuse or fill in at submit time (no worker needed)."""
import re

import pytest
from django.contrib.auth.models import Group

from trainhub.jobs.services import job_submit, spec_validate
from trainhub.pools.models import Worker, WorkerPool
from workers.runner.config import SpecError

TINY = {"name": "t", "data": {"dataset": "iris"}, "model": {"name": "logreg"}, "train": {"epochs": 1}}


@pytest.fixture
def gpu_pool(db):
    return WorkerPool.objects.create(name="gpu", kind="gpu", queue="gpu", gpus_per_worker=0)


def refusal(data, owner=None) -> dict:
    with pytest.raises(SpecError) as err:
        spec_validate(data, owner=owner)
    return err.value.errors


def test_a_disabled_pool_refuses_submissions_but_a_draining_one_queues_them(cpu_pool, user):
    cpu_pool.state = "disabled"
    cpu_pool.save()
    assert "disabled" in refusal(TINY)["pool"]
    cpu_pool.state = "draining"
    cpu_pool.save()
    assert spec_validate(TINY)[1] == cpu_pool


def test_a_restricted_pool_refuses_users_outside_its_groups(cpu_pool, user, django_user_model):
    team, other = Group.objects.create(name="vision"), Group.objects.create(name="nlp")
    cpu_pool.groups.add(team)
    assert "may not submit" in refusal(TINY, owner=user)["pool"]
    user.groups.add(other)  # a group, but not one of the pool's
    assert "may not submit" in refusal(TINY, owner=user)["pool"]
    user.groups.add(team)
    assert job_submit(owner=user, data=TINY).pool == cpu_pool
    admin = django_user_model.objects.create_superuser("root", password="pw-for-tests-only")
    assert job_submit(owner=admin, data=TINY).pool == cpu_pool  # in no group at all


def test_the_new_job_form_offers_only_the_pools_a_user_may_submit_to(cpu_pool, user, user_client,
                                                                     django_assert_max_num_queries):
    vision, nlp = Group.objects.create(name="vision"), Group.objects.create(name="nlp")
    for name, group in [("gpu-vision", vision), ("gpu-nlp", nlp), ("gpu-both", None)]:
        pool = WorkerPool.objects.create(name=name, queue=name)
        pool.groups.add(*([group] if group else [vision, nlp]))
    WorkerPool.objects.create(name="old", queue="old", state="disabled")
    user.groups.add(nlp)

    def offered() -> list[str]:
        html = user_client.get("/jobs/new").content.decode()
        select = html[html.index('name="pool"'):]
        return re.findall(r'<option value="([^"]+)"', select[:select.index("</select>")])

    assert offered() == ["cpu", "gpu-both", "gpu-nlp"]
    with django_assert_max_num_queries(4):  # one statement for the pools, however many there are
        assert offered() == ["cpu", "gpu-both", "gpu-nlp"]


def test_a_pool_refuses_modes_it_does_not_accept(cpu_pool):
    cpu_pool.modes = "ddp, deepspeed"
    cpu_pool.save()
    assert "accepts only ddp, deepspeed" in refusal(TINY)["mode"]


def test_priority_above_the_pools_maximum_is_refused_and_the_default_fills_in(cpu_pool):
    cpu_pool.max_priority, cpu_pool.default_priority, cpu_pool.default_timeout_minutes = 10, 5, 7
    cpu_pool.save()
    assert "up to 10" in refusal({**TINY, "priority": 50})["priority"]
    spec, _ = spec_validate(TINY)
    assert (spec.priority, spec.timeout_minutes) == (5, 7)
    spec, _ = spec_validate({**TINY, "priority": -3, "timeout_minutes": 60})
    assert (spec.priority, spec.timeout_minutes) == (-3, 60)


def test_more_gpus_than_any_worker_has_is_refused_with_the_most_available(gpu_pool):
    Worker.objects.create(hostname="a@test", pool=gpu_pool, gpu_count=2)
    Worker.objects.create(hostname="b@test", pool=gpu_pool, gpu_count=4)
    spec = {**TINY, "pool": "gpu", "mode": "ddp", "resources": {"procs_per_node": 1, "gpus_per_node": 5}}
    assert "the most is 4" in refusal(spec)["resources.gpus_per_node"]
    gpu_pool.gpus_per_worker = 1
    gpu_pool.save()
    spec["resources"]["gpus_per_node"] = 2
    assert "the most is 1" in refusal(spec)["resources.gpus_per_node"]


def test_gpus_on_a_cpu_pool_are_refused(cpu_pool):
    spec = {**TINY, "resources": {"gpus_per_node": 1}}
    assert "has no GPUs" in refusal(spec)["resources.gpus_per_node"]


def test_a_pool_created_disabled_the_old_way_is_disabled(db):
    pool = WorkerPool.objects.create(name="old", queue="old", enabled=False)
    assert pool.state == "disabled" and not WorkerPool.objects.get(pk=pool.pk).enabled
