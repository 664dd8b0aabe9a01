"""The log viewer's pages and fragments: windows of lines, search, first error, download,
metrics export. The live stream itself is in ``stream.py``; the page that holds them in ``detail.py``."""
from __future__ import annotations

import csv
import json
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET

from trainhub.jobs import ansi, logs, retention
from trainhub.jobs.models import Job, Metric
from trainhub.jobs.services import jobs_visible_to
from trainhub.jobs.views import aiodb, int_param, job_for_user
from workers.runner.errors import SpecError

PAGE = 500
SEARCH_PAGE = 100


def log_filters(request: HttpRequest) -> dict:
    stream = request.GET.get("stream") or None
    return {"rank": int_param(request.GET.get("rank") or None), "stream": stream if stream in ("o", "e", "s") else None}


def _query(filters: dict, **extra) -> str:
    params = {k: v for k, v in {**filters, **extra}.items() if v is not None and v != ""}
    return urlencode(params)


def log_window(request: HttpRequest, job: Job) -> dict:
    """The lines the job page opens with: the tail, or a window around ``?line=SEQ``."""
    filters = log_filters(request)
    href = reverse("job_detail", args=[job.pk])
    target = int_param(request.GET.get("line"))
    if target is not None:
        before = logs.read_before(job.pk, target, PAGE // 2, **filters)
        after = logs.read_lines(job.pk, target - 1, PAGE // 2, **filters)
        lines, following = before + after, False
    else:
        lines, following = logs.tail_lines(job.pk, PAGE, **filters), True
    first = lines[0].seq if lines else None
    last = lines[-1].seq if lines else -1
    return {
        "job": job, "filters": filters, "following": following, "target": target,
        "rows": mark_safe("".join(ansi.row(l, href=href) for l in lines)),
        "older_url": _older_url(job, filters, first) if first else None,
        "newer_url": (f"{reverse('job_log_page', args=[job.pk])}?{_query(filters, after=last)}"
                      if not following and lines else None),
        "stream_url": f"{reverse('job_log_stream', args=[job.pk])}?{_query(filters, after=last)}",
        "last_seq": last, "ranks": list(range(max(1, _world_size(job)))),
        "log_pruned": "" if job.is_active else retention.pruned_note(job.pk),
    }


def _older_url(job: Job, filters: dict, first: int) -> str:
    return f"{reverse('job_log_page', args=[job.pk])}?{_query(filters, before=first)}"


def _world_size(job: Job) -> int:
    try:
        return job.spec_model.world_size
    except SpecError:  # a stored spec that no longer validates still has its log shown
        return 1


@login_required
@require_GET
def job_log_page(request: HttpRequest, job_id: int) -> HttpResponse:
    """Rows before ``before`` (paging back) or after ``after`` (paging forward), with the next button."""
    job = job_for_user(request, job_id)
    filters = log_filters(request)
    href = reverse("job_detail", args=[job.pk])
    before, after = int_param(request.GET.get("before")), int_param(request.GET.get("after"))
    if before is not None:
        lines = logs.read_before(job.pk, before, PAGE, **filters)
        more = _older_url(job, filters, lines[0].seq) if lines and lines[0].seq > 0 else None
        button = f'<a class="button older" href="{more}" hx-get="{more}" hx-swap="outerHTML">Load older lines</a>' if more else ""
        body = button + "".join(ansi.row(l, href=href) for l in lines)
    else:
        lines = logs.read_lines(job.pk, -1 if after is None else after, PAGE, **filters)
        last = lines[-1].seq if lines else after
        more = f"{reverse('job_log_page', args=[job.pk])}?{_query(filters, after=last)}"
        button = f'<a class="button newer" href="{more}" hx-get="{more}" hx-swap="outerHTML">Load newer lines</a>'
        body = "".join(ansi.row(l, href=href) for l in lines) + button
    return HttpResponse(body if request.htmx else f'<div class="log">{body}</div>')


@login_required
@require_GET
def job_log_search(request: HttpRequest, job_id: int) -> HttpResponse:
    """Matches across the whole stored log, highlighted, a page at a time (by seq)."""
    job = job_for_user(request, job_id)
    filters = log_filters(request)
    query = request.GET.get("q", "")[:200]
    after = int_param(request.GET.get("after"))
    after = -1 if after is None else after
    lines = logs.search_lines(job.pk, query, after, SEARCH_PAGE + 1, **filters) if query else []
    more = lines[SEARCH_PAGE - 1].seq if len(lines) > SEARCH_PAGE else None
    href = reverse("job_detail", args=[job.pk])
    context = {
        "job": job, "query": query, "count": min(len(lines), SEARCH_PAGE),
        "rows": mark_safe("".join(ansi.row(l, href=href, body=ansi.highlight(l.text, query))
                                  for l in lines[:SEARCH_PAGE])),
        "more_url": f"{reverse('job_log_search', args=[job.pk])}?{_query(filters, q=query, after=more)}"
                    if more is not None else None,
    }
    template = "jobs/log_search.html#results" if request.htmx else "jobs/log_search.html"
    return render(request, template, context)


@login_required
@require_GET
def job_log_first_error(request: HttpRequest, job_id: int) -> HttpResponse:
    job = job_for_user(request, job_id)
    seq = logs.first_error(job.pk)
    url = reverse("job_detail", args=[job.pk])
    if seq is None:
        return redirect(f"{url}?no_error=1#log")
    return redirect(f"{url}?line={seq}#L{seq}")


def _download_text(lines, ranks: bool) -> str:
    if ranks:
        return "".join(f"[rank{l.rank}]: {l.text}\n" for l in lines)
    return "".join(f"{l.text}\n" for l in lines)


@login_required
@require_GET
def job_log_download(request: HttpRequest, job_id: int) -> HttpResponse:
    """The full log as plain text, streamed a chunk of rows at a time (never held in memory)."""
    job = job_for_user(request, job_id)
    ranks = logs.has_ranks(job.pk)
    if isinstance(request, ASGIRequest):
        async def chunks():  # under ASGI a sync iterator would be read into a list first
            after = -1
            while True:
                lines = await aiodb.call(logs.read_lines, job.pk, after, 5000)
                if not lines:
                    return
                yield _download_text(lines, ranks)
                after = lines[-1].seq
        content = chunks()
    else:
        content = (_download_text(lines, ranks) for lines in logs.iter_all(job.pk))
    response = StreamingHttpResponse(content, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="job-{job.pk}.log"'
    return response


def _metrics_payload(job: Job, after: int) -> dict:
    series: dict[str, dict[str, list]] = {}
    rows = (Metric.objects.filter(job_id=job.pk, step__gt=after).order_by("name", "step")
            .values_list("name", "step", "value"))
    for name, step, value in rows.iterator(chunk_size=5000):
        s = series.setdefault(name, {"steps": [], "values": []})
        s["steps"].append(step)
        s["values"].append(value)
    return {"series": series, **progress_payload(job, first_point(job) if job.is_active else None), "at": timezone.now().isoformat()}


def first_point(job: Job):
    """(step, when) of this attempt's first metric point, through the (job, name, step) index."""
    name = Metric.objects.filter(job_id=job.pk).values_list("name", flat=True).first()
    if name is None or job.started_at is None:
        return None
    return (Metric.objects.filter(job_id=job.pk, name=name, at__gte=job.started_at).order_by("step")
            .values_list("step", "at").first())


def progress_payload(job: Job, first=None) -> dict:
    """Status, steps, elapsed time and ETA: metrics.json and the live stream's ``progress`` event.
    ``first``: ``first_point(job)``, read by the caller (the live stream reads it in its thread)."""
    elapsed = (job.duration.total_seconds() if job.duration else None)
    eta = None
    if elapsed and job.step and job.total_steps and job.is_active:
        eta = elapsed / job.step * max(0, job.total_steps - job.step)
        if first is not None and job.step > first[0]:
            # the pace since the first reported step: start-up (imports, data loading) is not a
            # step's cost, and counting it made the first estimates several times too long
            pace = (timezone.now() - first[1]).total_seconds() / (job.step - first[0])
            eta = pace * max(0, job.total_steps - job.step)
    return {"status": job.status, "active": job.is_active, "step": job.step, "total_steps": job.total_steps,
            "elapsed_seconds": elapsed, "eta_seconds": eta, "metrics_note": job.metrics_note}


@login_required
@require_GET
def job_metrics_json(request: HttpRequest, job_id: int) -> HttpResponse:
    """Columnar series (``?after=STEP`` for only newer points), progress and ETA."""
    job = job_for_user(request, job_id)
    after = int_param(request.GET.get("after"))
    response = JsonResponse(_metrics_payload(job, -1 if after is None else after))
    if request.GET.get("download"):
        response["Content-Disposition"] = f'attachment; filename="job-{job.pk}-metrics.json"'
    return response


def _cell(text: str) -> str:
    """A job names its metrics: one that a spreadsheet would run as a formula (``=HYPERLINK(…)``,
    ``+cmd|…``, ``@SUM``) is quoted with a leading apostrophe, as OWASP advises for CSV exports."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


class _Echo:
    def write(self, value):
        return value


@login_required
@require_GET
def job_metrics_csv(request: HttpRequest, job_id: int) -> HttpResponse:
    job = job_for_user(request, job_id)
    writer = csv.writer(_Echo())
    rows = (Metric.objects.filter(job_id=job.pk).order_by("step", "name")
            .values_list("step", "name", "value", "at"))

    def lines():
        yield writer.writerow(["step", "name", "value", "at"])
        for step, name, value, at in rows.iterator(chunk_size=5000):
            yield writer.writerow([step, _cell(name), repr(value), at.isoformat()])

    if isinstance(request, ASGIRequest):
        body = HttpResponse("".join(lines()), content_type="text/csv")  # metrics are small next to logs
    else:
        body = StreamingHttpResponse(lines(), content_type="text/csv")
    body["Content-Disposition"] = f'attachment; filename="job-{job.pk}-metrics.csv"'
    return body


@login_required
@require_GET
def job_compare(request: HttpRequest) -> HttpResponse:
    """Jobs side by side: every metric they all have overlaid (one chart each, a line per job), or
    the one ``metric`` asked for, and the spec settings in which they differ.
    ``/jobs/compare?ids=3,5,8[&metric=loss]``; the job list's "Compare selected" sends repeated ``ids``."""
    raw = ",".join(request.GET.getlist("ids")).replace(" ", ",")  # the job page sends its own id and the others
    ids = list(dict.fromkeys(i for i in (int_param(p) for p in raw.split(",")) if i))[:12]
    jobs = list(jobs_visible_to(request.user).filter(pk__in=ids).order_by("pk"))
    held: dict[int, set[str]] = {j.pk: set() for j in jobs}
    for job_id, name in Metric.objects.filter(job_id__in=list(held)).values_list("job_id", "name").distinct():
        held[job_id].add(name)
    names = sorted(set().union(*held.values())) if held else []
    common = sorted(set.intersection(*held.values())) if held else []
    asked = request.GET.get("metric", "").strip()
    missing = ""
    if asked and asked not in names:
        missing = (f"No job here has a metric named “{asked}”. " +
                   (f"They have: {', '.join(names)}." if names else "None of them has recorded any metric yet."))
    shown = [asked] if asked in names else common
    sources = [{"id": j.pk, "name": f"#{j.pk} {j.name}", "url": reverse("job_metrics_json", args=[j.pk])}
               for j in jobs]
    return render(request, "jobs/compare.html", {
        "jobs": jobs, "names": names, "metric": asked if asked in names else "", "shown": shown, "missing": missing,
        "only_some": [n for n in names if n not in common], "diff": spec_diff(jobs),
        "ids": ",".join(str(j.pk) for j in jobs), "sources": sources})


def _flat(value, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, inner in value.items():
            out.update(_flat(inner, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: value}


def spec_diff(jobs: list[Job]) -> list[tuple[str, list[str]]]:
    """The spec settings (dotted paths) whose values differ between ``jobs``: (path, value per job)."""
    flat = [_flat(j.spec or {}) for j in jobs]
    keys = sorted(set().union(*flat)) if flat else []
    rows = []
    for key in keys:
        values = [f.get(key, "—") for f in flat]
        if key != "name" and len({repr(v) for v in values}) > 1:
            rows.append((key, [v if isinstance(v, str) else json.dumps(v) for v in values]))
    return rows
