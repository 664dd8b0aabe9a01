"""Two users with a job, a template and a token each, and the URL map walked from the resolver."""
from __future__ import annotations

import re

import pytest
from django.urls import URLResolver, get_resolver


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob", password="another-secret-pw")


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("root", password="staff-secret-pw", is_staff=True)


def things_of(owner, pool, job_name: str, template_name: str, template_job: str, token_name: str) -> dict:
    """A job, a template and a token of ``owner``: the URL parameters of every route that takes them."""
    from trainhub.api.models import ApiToken
    from trainhub.jobs.job_templates import template_save
    from trainhub.jobs.services import job_submit

    job = job_submit(owner=owner, data={"name": job_name})
    template = template_save(owner=owner, name=template_name, spec={"name": template_job})
    token, _ = ApiToken.issue(owner, token_name)
    return {"job_id": job.pk, "template_id": template.pk, "token_id": token.pk, "name": pool.name,
            "path": "stdout.log", "rest": "nowhere"}


@pytest.fixture
def bobs_things(bob, cpu_pool, live_settings):
    """Bob's job, template and token: what alice must not reach."""
    return things_of(bob, cpu_pool, "bobs-secret-job", "bobs-template", "bobs-template-job", "bobs-token")


def routes(patterns=None, prefix=""):
    """Every (route, pattern) of the URL map, includes flattened."""
    for p in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(p, URLResolver):
            yield from routes(p.url_patterns, prefix + str(p.pattern))
        else:
            yield prefix + str(p.pattern), p


def fill(route: str, values: dict) -> str | None:
    """The route with each <converter:name> replaced from ``values``; None for regex routes
    and for parameters we have no value for (the admin's own object URLs)."""
    if route.startswith("^") or "(?P<" in route or route.endswith("$"):
        return None
    if any(name not in values for name in re.findall(r"<(?:\w+:)?(\w+)>", route)):
        return None
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(values[m.group(1)]), route)


@pytest.fixture
def finished_script_job(start_worker, cpu_pool, user, tmp_path):
    """Run ``source`` as a script job of ``user`` on a real CPU worker and return the job once it ended."""
    from tests.conftest import wait_for
    from trainhub.jobs.models import Job
    from trainhub.jobs.services import job_submit
    from trainhub.pools.models import Workspace

    def run(workspace: str, source: str, timeout: float = 120):
        (tmp_path / workspace).mkdir()
        (tmp_path / workspace / "job.py").write_text(source)
        Workspace.objects.create(name=workspace, path=str(tmp_path / workspace))
        start_worker("cpu")
        job = job_submit(owner=user, data={"mode": "script", "script": {"workspace": workspace, "entry": "job.py"}})
        return wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                        timeout=timeout, message=f"the {workspace} job to end")

    return run
