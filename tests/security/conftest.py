"""Two users with a job, a template and a token each, and the URL map walked from the resolver."""
from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob", password="another-secret-pw")


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("root", password="staff-secret-pw", is_staff=True)


@pytest.fixture
def bobs_things(bob, cpu_pool, live_settings):
    """Bob's job, template and token: what alice must not reach."""
    from trainhub.api.models import ApiToken
    from trainhub.jobs.job_templates import template_save
    from trainhub.jobs.services import job_submit

    job = job_submit(owner=bob, data={"name": "bobs-secret-job"})
    template = template_save(owner=bob, name="bobs-template", spec={"name": "bobs-template-job"})
    token, _ = ApiToken.issue(bob, "bobs-token")
    return {"job_id": job.pk, "template_id": template.pk, "token_id": token.pk, "name": cpu_pool.name,
            "path": "stdout.log", "rest": "nowhere"}


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
