from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from trainhub.api import rundir
from trainhub.jobs import logs
from trainhub.jobs.models import Job
from trainhub.jobs.services import job_cancel, job_resume_from, jobs_visible_to
from workers.runner.config import SpecError, dump_yaml


def _get_job_for_user(request: HttpRequest, job_id: int) -> Job:
    return get_object_or_404(jobs_visible_to(request.user), pk=job_id)


def _page_int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


# issue 7: the list (filters, search, bulk cancel) and the typed per-mode form live in their own modules
from trainhub.jobs.list_views import job_list  # noqa: E402,F401
from trainhub.jobs.new_views import job_new  # noqa: E402,F401


def _files(job: Job) -> dict:
    return {"checkpoints": rundir.checkpoints(job.pk), "artifacts": rundir.artifacts(job.pk)}


@login_required
@require_GET
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _get_job_for_user(request, job_id)
    fragment = request.GET.get("fragment")
    if fragment in ("status", "history"):
        return render(request, f"jobs/detail.html#{fragment}", {"job": job, "events": job.events.select_related("actor")})
    if fragment == "files":
        return render(request, "jobs/detail.html#files", {"job": job, **_files(job)})
    if fragment is not None:
        raise Http404("unknown fragment")
    lines = logs.tail_lines(job.pk)
    context = {"job": job, "events": job.events.select_related("actor"), "spec_yaml": dump_yaml(job.spec), **_files(job),
               "lines": lines, "last_seq": lines[-1].seq if lines else -1}
    return render(request, "jobs/detail.html", context)


@login_required
@require_GET
def job_log_lines(request: HttpRequest, job_id: int) -> HttpResponse:
    """New lines after ``after`` as rows to append; re-polls itself while the job is alive."""
    job = _get_job_for_user(request, job_id)
    after = _page_int(request.GET.get("after"))
    after = -1 if after is None else after
    lines = logs.read_lines(job.pk, after=after, limit=2000)
    last = lines[-1].seq if lines else after
    return render(request, "jobs/detail.html#log-lines", {"job": job, "lines": lines, "last_seq": last})


@login_required
@require_POST
def job_cancel_view(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _get_job_for_user(request, job_id)
    job_cancel(job, actor=request.user)
    job.refresh_from_db()
    if request.htmx:
        return render(request, "jobs/detail.html#status", {"job": job})
    return redirect("job_detail", job_id=job.pk)


@login_required
@require_POST
def job_resume_view(request: HttpRequest, job_id: int) -> HttpResponse:
    """Start a new job from one of this job's checkpoints."""
    job = _get_job_for_user(request, job_id)
    checkpoint = request.POST.get("checkpoint", "")
    if checkpoint not in {c["name"] for c in rundir.checkpoints(job.pk)}:
        return HttpResponse(f"job {job.pk} has no checkpoint {checkpoint[:100]!r}", status=404, content_type="text/plain")
    try:
        new = job_resume_from(job, checkpoint, owner=request.user)
    except SpecError as exc:
        message = "; ".join(f"{k}: {v}" for k, v in exc.errors.items())
        return HttpResponse(f"cannot resume: {message}", status=422, content_type="text/plain")
    return redirect("job_detail", job_id=new.pk)
