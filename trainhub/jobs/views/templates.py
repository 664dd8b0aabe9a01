"""The templates page: your saved specs, start a job from one, delete."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from trainhub.jobs.job_templates import templates_of
from workers.runner.config import dump_yaml


@login_required
@require_GET
def template_list(request: HttpRequest) -> HttpResponse:
    templates = [(t, dump_yaml(t.spec)) for t in templates_of(request.user)]
    saved = request.GET.get("saved")
    return render(request, "jobs/templates.html", {"templates": templates, "saved": saved})


@login_required
@require_POST
def template_delete(request: HttpRequest, template_id: int) -> HttpResponse:
    get_object_or_404(templates_of(request.user), pk=template_id).delete()
    return redirect("job_templates")


urlpatterns = [
    path("", template_list, name="job_templates"),
    path("<int:template_id>/delete", template_delete, name="job_template_delete"),
]
