"""Job templates: a named, validated spec a user starts new jobs from."""
from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from trainhub.jobs.models import Job, JobTemplate
from trainhub.jobs.services import job_submit
from workers.runner.config import SpecError, parse_spec


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overrides.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def template_save(*, owner, name: str, spec: Any, description: str = "", replace: bool = False) -> JobTemplate:
    """Validate ``spec`` and store it under ``name``; an existing name is refused unless ``replace``."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise SpecError({"template.name": "give the template a name of 1 to 100 characters"})
    data = parse_spec(spec).to_dict()
    existing = JobTemplate.objects.filter(owner=owner, name=name).first()
    if existing is not None:
        if not replace:
            raise SpecError({"template.name": f"you already have a template named {name!r}; "
                                              "choose another name or replace it"})
        existing.spec, existing.description, existing.updated_at = data, description[:300], timezone.now()
        existing.save(update_fields=["spec", "description", "updated_at"])
        return existing
    try:
        with transaction.atomic():
            return JobTemplate.objects.create(owner=owner, name=name, spec=data, description=description[:300])
    except IntegrityError:  # a concurrent save of the same name won the race
        raise SpecError({"template.name": f"you already have a template named {name!r}"}) from None


def template_start(template: JobTemplate, *, owner, overrides: dict[str, Any] | None = None) -> Job:
    """Submit a job from ``template``, with ``overrides`` merged key by key into its spec."""
    return job_submit(owner=owner, data=_merge(template.spec, overrides or {}))


def templates_of(user):
    return JobTemplate.objects.filter(owner=user)
