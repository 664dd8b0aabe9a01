"""The job list: filters (status, mode, pool, owner for staff), name search, keyset pagination,
live rows while on the first page, bulk cancel."""
from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from trainhub.jobs.models import ACTIVE, WAITING, Status
from trainhub.jobs.services import job_cancel, jobs_visible_to, may_cancel
from trainhub.jobs.views import int_param
from trainhub.pools.models import WorkerPool
from workers.runner.config import MODES

PAGE_SIZE = 50
MAX_BULK = 500


def _filters(request: HttpRequest) -> dict[str, str]:
    """The filters in the query string that are valid; unknown values are dropped, not errors."""
    get = request.GET
    found = {"status": get.get("status", ""), "mode": get.get("mode", ""), "pool": get.get("pool", "")[:100],
             "q": get.get("q", "").strip()[:200], "owner": get.get("owner", "").strip()[:150]}
    if found["status"] not in Status.values:
        found["status"] = ""
    if found["mode"] not in MODES:
        found["mode"] = ""
    if not request.user.is_staff:
        found["owner"] = ""
    found["sort"] = "oldest" if get.get("sort") == "oldest" else ""
    return {k: v for k, v in found.items() if v}


def _query(request: HttpRequest, filters: dict[str, str]):
    qs = jobs_visible_to(request.user).order_by("pk" if filters.get("sort") == "oldest" else "-pk")
    if "status" in filters:
        qs = qs.filter(status=filters["status"])
    if "mode" in filters:
        qs = qs.filter(mode=filters["mode"])
    if "pool" in filters:
        qs = qs.filter(pool__name=filters["pool"])
    if "owner" in filters:
        qs = qs.filter(owner__username=filters["owner"])
    if "q" in filters:
        qs = qs.filter(name__icontains=filters["q"])
    return qs


@login_required
@require_http_methods(["GET", "POST"])
def job_list(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _bulk_cancel(request)
    filters = _filters(request)
    qs = _query(request, filters)
    # keyset pagination in either direction: a cursor is the last id seen, never an offset
    oldest = filters.get("sort") == "oldest"
    cursor_name = "after" if oldest else "before"
    cursor = int_param(request.GET.get(cursor_name))
    if cursor:
        qs = qs.filter(pk__gt=cursor) if oldest else qs.filter(pk__lt=cursor)
    jobs = list(qs.select_related("slurm_run")[: PAGE_SIZE + 1])  # Slurm's pending reason, one query
    has_more = len(jobs) > PAGE_SIZE
    jobs = jobs[:PAGE_SIZE]
    reasons = WAITING["jobs"](jobs)
    for job in jobs:
        job.list_reason = reasons.get(job.pk, "")
    query = urlencode(filters)
    context = {"jobs": jobs, "filters": filters, "status": filters.get("status", ""), "statuses": Status.values,
               "modes": MODES, "pools": WorkerPool.objects.values_list("name", flat=True), "before": cursor,
               "cursor_name": cursor_name, "query": query, "amp": "&" if query else "",
               "next_before": jobs[-1].pk if has_more else None,
               "any_active": any(j.status in ACTIVE for j in jobs)}
    partial = request.htmx and request.htmx.target in ("job-results", "job-rows")
    return render(request, "jobs/list.html#results" if partial else "jobs/list.html", context)


def _bulk_cancel(request: HttpRequest) -> HttpResponse:
    ids = [i for i in (int_param(v) for v in request.POST.getlist("ids")[:MAX_BULK]) if i]
    cancelled = 0
    for job in jobs_visible_to(request.user).filter(pk__in=ids, status__in=ACTIVE):
        if not may_cancel(request.user, job):  # staff see every job; cancelling others' needs the permission
            continue
        cancelled += job_cancel(job, actor=request.user, reason="cancelled by user (bulk)")
    messages.info(request, f"cancelling {cancelled} of {len(ids)} selected job(s)" if ids else "no jobs selected")
    back = request.POST.get("next", "")
    return redirect(back if back.startswith("/") and not back.startswith("//") else "job_list")
