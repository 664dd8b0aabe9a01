"""The job page's live sections on the log stream (``?channel=page``): status (+ reason),
progress, history, metrics, files and (a cross-site job) sites, as named SSE events beside
the log lines.

The stream's hub reads ``PageWatch.refresh`` once a second per job — not once per viewer —
and keeps a fingerprint of each section plus the newest metric points. Each viewer
(``PageViewer``) compares the fingerprints with what it last sent and sends only what
changed; a new connection has sent nothing, so it starts with the whole truth (a snapshot),
which is what makes a reconnect safe. Sections are the page's own partials, rendered with
the viewer's request (its CSRF token), so a reload and the stream show the same HTML.
"""
from __future__ import annotations

import json

from django.db.models import Max
from django.template.loader import render_to_string

from trainhub.jobs import runfiles
from trainhub.jobs.models import Job, JobEvent, Metric, Status
from trainhub.jobs.views import aiodb
from trainhub.jobs.views.detail import fragment_context
from trainhub.jobs.views.logs import first_point, progress_payload
from trainhub.jobs.sites import sites_key

FRAGMENTS = ("status", "history", "files", "sites")
METRICS_KEPT = 20_000  # newest metric points a hub keeps for its viewers; older ones come from the database
METRICS_BATCH = 5_000


def sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


class PageWatch:
    """What the job page shows, as one server process last read it (owned by the job's hub)."""

    def __init__(self, job_id: int):
        self.job_id = job_id
        self.job: Job | None = None
        self.keys: dict[str, object] = {}
        # (start, points): every point with pk > start, as (pk, name, step, value) by pk. Replaced
        # whole, never changed in place: viewers read it on the event loop while refresh() runs in a thread.
        self.metrics: tuple[int, list[tuple[int, str, int, float]]] | None = None
        self.read = False  # refresh() has run at least once
        self.first = None  # (step, when) of the attempt's first metric point: the ETA's pace starts there

    @property
    def status(self) -> str:
        return self.job.status if self.job else Status.CANCELLED  # a deleted job: end the stream

    def refresh(self) -> None:
        """One read of the job row, its newest event, its new metric points and its file names."""
        job = Job.objects.select_related("pool").filter(pk=self.job_id).first()
        self.job = job
        if job is None:
            self.read = True
            return
        leases = tuple(job.gpu_leases.values_list("index", flat=True)) \
            if job.status == Status.RUNNING else ()
        self.keys = {
            "status": (job.status, job.error, job.exit_code, job.attempt, job.worker_id, bool(job.total_steps),
                       leases, job.waiting_reason),
            "progress": (job.status, job.step, job.total_steps, job.metrics_note),
            "history": JobEvent.objects.filter(job_id=job.pk).aggregate(last=Max("pk"))["last"],
            # names only: a growing file's size is not worth a message a second; the final status re-sends
            "files": (job.status, tuple(c["name"] for c in runfiles.checkpoints(job.pk)),
                      tuple(a["path"] for a in runfiles.artifacts(job.pk))),
        }
        sites = sites_key(job)
        if sites is not None:  # a cross-site job: its Sites panel
            self.keys["sites"] = sites
        self._read_metrics()
        if job.status == Status.RUNNING and job.step and (self.first is None or self.first[1] < job.started_at):
            self.first = first_point(job)
        self.read = True

    def _read_metrics(self) -> None:
        if self.metrics is None:
            self.metrics = (Metric.objects.filter(job_id=self.job_id).aggregate(last=Max("pk"))["last"] or 0, [])
        start, points = self.metrics
        after = points[-1][0] if points else start
        rows = list(Metric.objects.filter(job_id=self.job_id, pk__gt=after).order_by("pk")
                    .values_list("pk", "name", "step", "value")[:METRICS_BATCH])
        if not rows:
            return
        points = points + rows
        if len(points) > METRICS_KEPT:
            cut = len(points) - METRICS_KEPT // 2
            start, points = points[cut - 1][0], points[cut:]
        self.metrics = (start, points)


def _series(rows) -> dict:
    """Metric rows as metrics.json's columnar series, steps ascending per name."""
    series: dict[str, dict[str, list]] = {}
    for _pk, name, step, value in sorted(rows, key=lambda r: (r[1], r[2])):
        s = series.setdefault(name, {"steps": [], "values": []})
        s["steps"].append(step)
        s["values"].append(value)
    return series


def _all_metrics(job_id: int, after: int) -> list[tuple[int, str, int, float]]:
    return list(Metric.objects.filter(job_id=job_id, pk__gt=after).order_by("pk")
                .values_list("pk", "name", "step", "value"))


def _fragment(request, job_id: int, name: str) -> str:
    job = Job.objects.select_related("pool", "worker").filter(pk=job_id).first()
    if job is None:
        return ""
    data = {"html": render_to_string(f"jobs/detail.html#{name}", fragment_context(job, name), request=request)}
    if name == "status":
        last = job.events.order_by("-pk").values_list("reason", flat=True).first()
        data.update(status=job.status, active=job.is_active, reason=job.error or last or "")
    return sse(name, data)


class PageViewer:
    """The page sections one client has been sent, and what to send it next."""

    def __init__(self, request, job_id: int):
        self.request = request
        self.job_id = job_id
        self.sent: dict[str, object] = {}
        self.metrics_cursor: int | None = None  # pk of the newest metric point sent

    async def events(self, watch: PageWatch) -> str:
        """SSE events for every section that changed since the last call (all of them the first time)."""
        if watch.job is None:
            return ""
        sent, cursor = dict(self.sent), self.metrics_cursor
        try:
            out = []
            for name in FRAGMENTS:
                if name not in watch.keys:
                    continue  # a section this job's page does not have
                key = watch.keys[name]
                if self.sent.get(name, self) != key:
                    self.sent[name] = key
                    out.append(await aiodb.call(_fragment, self.request, self.job_id, name))
            if self.sent.get("progress", self) != watch.keys.get("progress"):
                self.sent["progress"] = watch.keys.get("progress")
                out.append(sse("progress", progress_payload(watch.job, watch.first)))
            rows = await self._new_metrics(watch)
            if rows:
                out.append(sse("metrics", {"series": _series(rows)}))
            return "".join(out)
        except BaseException:  # a database read failed (or the stream closed): none of it was sent
            self.sent, self.metrics_cursor = sent, cursor
            raise

    async def _new_metrics(self, watch: PageWatch) -> list:
        start, points = watch.metrics or (0, [])
        if self.metrics_cursor is None or self.metrics_cursor < start:
            # a snapshot from the database: everything this client has not had, then the hub's buffer
            rows = await aiodb.call(_all_metrics, self.job_id, self.metrics_cursor or 0)
            self.metrics_cursor = max([start, *(r[0] for r in rows)])
        else:
            rows = []
        fresh = [r for r in points if r[0] > self.metrics_cursor]
        if fresh:
            self.metrics_cursor = fresh[-1][0]
        return rows + fresh
