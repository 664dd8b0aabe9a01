"""Checkpoints and artifacts of a job: list and download, never outside the job's run directory."""
from __future__ import annotations

import os

from django.http import FileResponse, StreamingHttpResponse
from ninja import Router
from ninja.errors import HttpError

from trainhub.jobs import runfiles
from trainhub.api.schemas import CheckpointOut, FileOut, responses
from trainhub.api.views_common import job_for

router = Router(tags=["files"])


@router.get("/jobs/{job_id}/checkpoints", response=responses({200: list[CheckpointOut]}), summary="A job's checkpoints, newest first")
def list_checkpoints(request, job_id: int):
    return runfiles.checkpoints(job_for(request, job_id).pk)


@router.get("/jobs/{job_id}/artifacts", response=responses({200: list[FileOut]}),
            summary="A job's files outside checkpoints/ (models, metrics, resolved config)")
def list_artifacts(request, job_id: int):
    return runfiles.artifacts(job_for(request, job_id).pk)


@router.get("/jobs/{job_id}/files/{path:path}", response=responses({200: None}),
            summary="Download one file, or a directory (e.g. a checkpoint) as a tar archive")
def download(request, job_id: int, path: str):
    job = job_for(request, job_id)
    try:
        opened = runfiles.open_path(job.pk, path)
    except runfiles.BadPath as exc:
        raise HttpError(400, f"refused path {path[:200]!r}: {exc}") from None
    if opened is None:
        raise HttpError(404, f"job {job.pk} has no file {path[:200]!r}; list them with /artifacts or /checkpoints")
    if opened.is_dir:
        name = f"job-{job.pk}-{opened.name}"
        response = StreamingHttpResponse(runfiles.TarStream(opened.fd, name), content_type="application/x-tar")
        response["Content-Disposition"] = f'attachment; filename="{name}.tar"'
        return response
    return FileResponse(os.fdopen(opened.fd, "rb"), as_attachment=True, filename=opened.name)
