"""REST API: token (Bearer) or session auth. Schema at /api/openapi.json."""
from django.http import HttpRequest
from ninja import Body, NinjaAPI, Query, Status
from ninja.errors import HttpError
from ninja.security import HttpBearer, django_auth

from trainhub.api import errors, files, pools, templates_api
from trainhub.api.models import ApiToken
from trainhub.api.schemas import Created, JobDetailOut, JobOut, JobPage, LogPage, Metrics, responses
from trainhub.api.views_common import job_for
from trainhub.jobs import logs
from trainhub.jobs.models import FINAL, Status as JobStatus
from trainhub.jobs.services import job_cancel, job_submit, jobs_visible_to, may_cancel
from trainhub.runs.waiting import pool_warning


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str):
        user = ApiToken.authenticate(token)
        if user is not None:
            request.user = user
        return user


api = NinjaAPI(title="TrainHub API", version="1", auth=[BearerToken(), django_auth], urls_namespace="api")
errors.install(api)
api.add_router("", files.router)
api.add_router("", templates_api.router)
api.add_router("", pools.router)
_job = job_for


@api.post("/jobs", response=responses({201: Created}), summary="Submit a job spec")
def create_job(request, spec: dict = Body(..., description="the job spec (see docs/SPEC.md)")):
    job = job_submit(owner=request.auth, data=spec)
    return Status(201, {"id": job.pk, "status": job.status, "url": f"/jobs/{job.pk}",
                        "warning": pool_warning(job.pool)})


@api.get("/jobs", response=responses({200: JobPage}),
         summary="List jobs: newest first from `before`, or oldest first from `after` (keyset paginated)")
def list_jobs(request, status: JobStatus | None = None, mode: str | None = None, pool: str | None = None,
              owner: str | None = None, q: str | None = Query(None, max_length=200, description="name contains"),
              before: int | None = None,
              after: int | None = Query(None, description="oldest first, ids above this (0 = from the start)"),
              limit: int = Query(50, ge=1, le=500)):
    qs = jobs_visible_to(request.auth).select_related("slurm_run")  # Slurm's pending reason: no query per job
    if status:
        qs = qs.filter(status=status)
    if mode:
        qs = qs.filter(mode=mode)
    if pool:
        qs = qs.filter(pool__name=pool)
    if owner:
        qs = qs.filter(owner__username=owner)
    if q:
        qs = qs.filter(name__icontains=q)
    if after is not None:
        items = list(qs.filter(pk__gt=after).order_by("pk")[:limit])
        return {"items": items, "next_before": None, "next_after": items[-1].pk if len(items) == limit else None}
    if before:
        qs = qs.filter(pk__lt=before)
    items = list(qs.order_by("-pk")[:limit])
    return {"items": items, "next_before": items[-1].pk if len(items) == limit else None}


@api.get("/jobs/{job_id}", response=responses({200: JobDetailOut}))
def get_job(request, job_id: int):
    return _job(request, job_id)


@api.post("/jobs/{job_id}/cancel", response=responses({200: JobOut}))
def cancel_job(request, job_id: int):
    job = _job(request, job_id)
    if not may_cancel(request.auth, job):
        raise HttpError(403, "only the job's owner or a user with the change job permission may cancel it")
    job_cancel(job, actor=request.auth)
    job.refresh_from_db()
    return job


@api.get("/jobs/{job_id}/logs", response=responses({200: LogPage}), summary="Log lines after a sequence number")
def job_logs(request, job_id: int, after: int = -1, limit: int = Query(1000, ge=1, le=10000)):
    job = _job(request, job_id)
    if job.status not in FINAL:  # a follower (``trainhub logs -f``) gets lines stored every 50 ms, not each second
        logs.mark_watched(job.pk)
    lines = logs.read_lines(job.pk, after=after, limit=limit)
    return {"lines": [l._asdict() for l in lines], "next_after": lines[-1].seq if lines else after,
            "job_status": job.status, "step": job.step, "total_steps": job.total_steps,
            "waiting_reason": job.waiting_reason, "slurm_pending_reason": job.slurm_waiting}


@api.get("/jobs/{job_id}/metrics", response=responses({200: Metrics}))
def job_metrics(request, job_id: int):
    job = _job(request, job_id)
    series = logs.metric_series(job.pk)
    return {"series": {k: [{"step": s, "value": v} for s, v in pts] for k, pts in series.items()},
            "note": job.metrics_note}
