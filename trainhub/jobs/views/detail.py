"""The job page and the actions on it (cancel, resume from a checkpoint).

Each live section of the page is a partial of ``jobs/detail.html`` (status, history, files,
and sites for a cross-site job):
the page renders them on a reload, ``?fragment=NAME`` renders one alone, and the live
stream (``stream.py``) sends the same HTML when the section changes.
"""
from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from trainhub.jobs import runfiles
from trainhub.jobs.failure import failure_of
from trainhub.jobs.models import Job
from trainhub.jobs.services import job_cancel, job_resume_from, may_cancel
from trainhub.jobs.views import job_for_user
from trainhub.jobs.views.logs import log_window
from trainhub.jobs.sites import site_rows
from workers.runner.config import SpecError, dump_yaml

FRAGMENTS = ("status", "history", "files", "sites")


def fragment_context(job: Job, name: str) -> dict:
    """What the partial ``name`` of the job page needs (the view and the live stream render with it)."""
    if name == "history":
        return {"job": job, "events": job.events.select_related("actor")}
    if name == "sites":
        return {"job": job, "sites": site_rows(job)}
    if name == "files":
        return {"job": job, "checkpoints": runfiles.checkpoints(job.pk), "artifacts": runfiles.artifacts(job.pk)}
    return {"job": job, "failure": failure_of(job), "grace": settings.TRAINHUB_GRACE_SECONDS}


@login_required
@require_GET
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = job_for_user(request, job_id)
    fragment = request.GET.get("fragment")
    if fragment is not None:
        if fragment not in FRAGMENTS:
            raise Http404("unknown fragment")
        return render(request, f"jobs/detail.html#{fragment}", fragment_context(job, fragment))
    context = {**fragment_context(job, "status"), **fragment_context(job, "history"), **fragment_context(job, "files"),
               **fragment_context(job, "sites"), **log_window(request, job),
               "spec_yaml": dump_yaml(job.spec), "no_error": request.GET.get("no_error")}
    return render(request, "jobs/detail.html", context)


@login_required
@require_POST
def job_cancel_view(request: HttpRequest, job_id: int) -> HttpResponse:
    job = job_for_user(request, job_id)
    if not may_cancel(request.user, job):
        raise PermissionDenied("only the job's owner or a user with the change job permission may cancel it")
    job_cancel(job, actor=request.user)
    job.refresh_from_db()
    if request.htmx:
        return render(request, "jobs/detail.html#status", fragment_context(job, "status"))
    return redirect("job_detail", job_id=job.pk)


@login_required
@require_POST
def job_resume_view(request: HttpRequest, job_id: int) -> HttpResponse:
    """Start a new job from one of this job's checkpoints."""
    job = job_for_user(request, job_id)
    checkpoint = request.POST.get("checkpoint", "")
    if checkpoint not in {c["name"] for c in runfiles.checkpoints(job.pk)}:
        return HttpResponse(f"job {job.pk} has no checkpoint {checkpoint[:100]!r}", status=404, content_type="text/plain")
    try:
        new = job_resume_from(job, checkpoint, owner=request.user)
    except SpecError as exc:
        message = "; ".join(f"{k}: {v}" for k, v in exc.errors.items())
        return HttpResponse(f"cannot resume: {message}", status=422, content_type="text/plain")
    return redirect("job_detail", job_id=new.pk)
