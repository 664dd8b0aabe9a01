"""Where a job's files live: ``TRAINHUB_RUNS_DIR/job-<id>/``. The one place that builds these paths.

The executor writes there, the web serves from there (trainhub/jobs/runfiles.py, which opens them
without following symlinks), and ``checkpoint.start_from`` names a checkpoint by the same layout.
"""
from __future__ import annotations

from pathlib import Path

from django.conf import settings

CHECKPOINTS = "checkpoints"


def runs_root() -> Path:
    return Path(settings.TRAINHUB_RUNS_DIR)


def run_dir_name(job_id: int) -> str:
    return f"job-{job_id}"


def run_dir(job_id: int) -> Path:
    """The run directory of job ``job_id`` (it may not exist yet)."""
    return runs_root() / run_dir_name(job_id)


def checkpoint_dir(reference: str) -> Path:
    """The directory a checkpoint reference names, e.g. ``job-12/checkpoints/step-400``.

    Only references that passed the spec's pattern (``job-N/checkpoints/step-M``) may come here.
    """
    job_part, rest = reference.split("/", 1)
    return run_dir(int(job_part.removeprefix("job-"))) / rest
