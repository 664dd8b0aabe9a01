from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from trainhub.jobs import logs
from trainhub.jobs.forms import JobForm, initial_from_spec
from trainhub.jobs.models import ACTIVE, Job, Status
from trainhub.jobs.services import job_cancel, job_clone_spec, job_submit, jobs_visible_to
from trainhub.pools.models import WorkerPool
from workers.runner.config import SpecError, dump_yaml

PAGE_SIZE = 50


def _get_job_for_user(request: HttpRequest, job_id: int) -> Job:
    return get_object_or_404(jobs_visible_to(request.user), pk=job_id)


def _page_int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


@login_required
@require_GET
def job_list(request: HttpRequest) -> HttpResponse:
    qs = jobs_visible_to(request.user).order_by("-pk")
    status = request.GET.get("status", "")
    if status in Status.values:
        qs = qs.filter(status=status)
    before = _page_int(request.GET.get("before"))
    if before:
        qs = qs.filter(pk__lt=before)
    jobs = list(qs[: PAGE_SIZE + 1])
    has_more = len(jobs) > PAGE_SIZE
    jobs = jobs[:PAGE_SIZE]
    context = {"jobs": jobs, "status": status, "statuses": Status.values, "before": before,
               "next_before": jobs[-1].pk if has_more else None,
               "any_active": any(j.status in ACTIVE for j in jobs)}
    template = "jobs/list.html#rows" if request.htmx and request.htmx.target == "job-rows" else "jobs/list.html"
    return render(request, template, context)


@login_required
@require_http_methods(["GET", "POST"])
def job_new(request: HttpRequest) -> HttpResponse:
    pools = list(WorkerPool.objects.filter(enabled=True).values_list("name", flat=True))
    if request.method == "POST":
        form = JobForm(request.POST, pools=pools)
        if form.is_valid():
            try:
                job = job_submit(owner=request.user, data=form.spec_data())
            except SpecError as exc:
                form.add_spec_errors(exc.errors)
            else:
                return redirect("job_detail", job_id=job.pk)
        return render(request, "jobs/new.html", {"form": form}, status=422)
    initial = {}
    clone = _page_int(request.GET.get("clone"))
    if clone:
        source = _get_job_for_user(request, clone)
        spec = job_clone_spec(source)
        initial = {**initial_from_spec(spec), "spec_yaml": dump_yaml(spec) if source.mode != "centralized" else ""}
    form = JobForm(initial=initial, pools=pools)
    return render(request, "jobs/new.html", {"form": form})


@login_required
@require_GET
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _get_job_for_user(request, job_id)
    fragment = request.GET.get("fragment")
    if fragment in ("status", "history"):
        return render(request, f"jobs/detail.html#{fragment}", {"job": job, "events": job.events.select_related("actor")})
    if fragment is not None:
        raise Http404("unknown fragment")
    lines = logs.tail_lines(job.pk)
    context = {"job": job, "events": job.events.select_related("actor"), "spec_yaml": dump_yaml(job.spec),
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
