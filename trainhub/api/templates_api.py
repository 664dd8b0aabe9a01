"""Job templates over the API: save a spec under a name, list, start a job from one."""
from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from ninja import Body, Router, Status

from trainhub.api.schemas import Created, TemplateIn, TemplateOut, responses
from trainhub.jobs.job_templates import template_save, template_start, templates_of

router = Router(tags=["templates"])


@router.get("/templates", response=responses({200: list[TemplateOut]}), summary="Your job templates")
def list_templates(request):
    return templates_of(request.auth)


@router.post("/templates", response=responses({201: TemplateOut}),
             summary="Save a spec as a named template (replace: true overwrites one of that name)")
def create_template(request, payload: TemplateIn):
    template = template_save(owner=request.auth, name=payload.name, spec=payload.spec,
                             description=payload.description, replace=payload.replace)
    return Status(201, template)


@router.get("/templates/{template_id}", response=responses({200: TemplateOut}))
def get_template(request, template_id: int):
    return get_object_or_404(templates_of(request.auth), pk=template_id)


@router.delete("/templates/{template_id}", response=responses({204: None}))
def delete_template(request, template_id: int):
    get_object_or_404(templates_of(request.auth), pk=template_id).delete()
    return Status(204, None)


@router.post("/templates/{template_id}/jobs", response=responses({201: Created}),
             summary="Submit a job from a template; overrides are merged key by key into its spec")
def start_template(request, template_id: int,
                   overrides: dict[str, Any] = Body(default={}, description='e.g. {"train": {"epochs": 5}}')):
    template = get_object_or_404(templates_of(request.auth), pk=template_id)
    job = template_start(template, owner=request.auth, overrides=overrides)
    return Status(201, {"id": job.pk, "status": job.status, "url": f"/jobs/{job.pk}"})
