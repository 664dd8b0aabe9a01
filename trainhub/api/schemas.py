from datetime import datetime
from typing import Any

from ninja import Schema

from trainhub.jobs.sites import site_rows


class JobOut(Schema):
    id: int
    name: str
    mode: str
    pool: str
    owner: str
    status: str
    priority: int
    attempt: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    exit_code: int | None
    error: str
    step: int
    total_steps: int
    progress: float | None
    waiting_reason: str = ""  # why a job has not started: queued, or claimed and held by Slurm ("" once it runs)
    spec: dict[str, Any]
    # Slurm's bare reason and queue place while it holds the job pending (waiting_reason says both)
    slurm_pending_reason: str = ""
    slurm_queue_position: int | None = None

    @staticmethod
    def resolve_slurm_pending_reason(job) -> str:
        return job.slurm_waiting

    @staticmethod
    def resolve_slurm_queue_position(job) -> int | None:
        return job.slurm_queue_position

    @staticmethod
    def resolve_pool(job) -> str:
        return job.pool.name

    @staticmethod
    def resolve_owner(job) -> str:
        return job.owner.username


class SiteOut(Schema):
    """One site of a cross-site job (docs/CROSS_SITE.md): as the job page's Sites panel shows it."""
    pool: str
    state: str  # running, lost, "lost, restarting in N s", healed, finished, failed for good …
    restarts: int
    max_restarts: int
    outer_step: float | None  # its last sync's outer step (None before its first sync)
    participants: float | None  # sites in that sync's quorum
    bytes: float | None  # sent in that sync
    last_sync_seconds: float | None
    sync_seconds: float | None  # all its syncs together


class JobDetailOut(JobOut):
    sites: list[SiteOut] = []  # a cross-site job's sites, in the spec's order (empty for any other job)

    @staticmethod
    def resolve_sites(job) -> list[dict]:
        return site_rows(job)


class JobPage(Schema):
    items: list[JobOut]
    next_before: int | None
    next_after: int | None = None


class Created(Schema):
    id: int
    status: str
    url: str
    warning: str = ""  # e.g. no worker of the job's pool is online: it is queued, but will wait


class SpecErrors(Schema):
    detail: str
    errors: dict[str, str]


class Message(Schema):
    detail: str


class ErrorOut(Schema):
    """Every error: a sentence, and for input errors the offending fields by dotted path."""
    detail: str
    errors: dict[str, str] | None = None


def responses(ok: dict[int, Any]) -> dict[int, Any]:
    """``ok`` plus the error responses every endpoint may give (documented for clients and schemathesis)."""
    return {**ok, 400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 422: ErrorOut}


class LogLineOut(Schema):
    seq: int
    rank: int
    stream: str
    text: str


class LogPage(Schema):
    lines: list[LogLineOut]
    next_after: int
    job_status: str
    step: int
    total_steps: int
    waiting_reason: str = ""
    slurm_pending_reason: str = ""  # kept for older clients: waiting_reason says it whole


class MetricPoint(Schema):
    step: int
    value: float


class Metrics(Schema):
    series: dict[str, list[MetricPoint]]
    #: why fewer points are stored than the job logged (thinned past TRAINHUB_METRIC_MAX_POINTS), else ""
    note: str = ""


class FileOut(Schema):
    path: str
    size: int
    modified: datetime


class CheckpointOut(Schema):
    name: str
    step: int
    path: str
    size: int
    modified: datetime
    files: list[str]


class TemplateIn(Schema):
    name: str
    description: str = ""
    spec: dict[str, Any]
    replace: bool = False


class TemplateOut(Schema):
    id: int
    name: str
    description: str
    spec: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class WorkerOut(Schema):
    hostname: str
    online: bool
    last_heartbeat: datetime
    info: dict[str, Any]


class PoolOut(Schema):
    name: str
    kind: str
    enabled: bool
    state: str
    modes: list[str] | None = None
    may_submit: bool
    description: str
    queued: int
    running: int
    workers_online: int
    queue: str | None = None
    workers: list[WorkerOut] | None = None
