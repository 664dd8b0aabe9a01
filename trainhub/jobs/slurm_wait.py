"""Why a Slurm pool's job waits, in Slurm's own words: its ``Reason`` while the batch job is
PENDING (Priority, Resources, QOSMaxJobsPerUserLimit …) and its place in the partition's queue,
kept on the job's ``SlurmRun`` row by the worker following it (``workers.slurm_execution``).

``slurm_held_reason`` is the Slurm backend's entry in ``trainhub.runs.waiting.BACKEND_REASONS``:
the job's one ``waiting_reason`` (page, list, API, CLI) says it while TrainHub has handed the job
to Slurm and Slurm holds it."""
from __future__ import annotations


def _held(job):
    run = getattr(job, "slurm_run", None)  # the reverse one-to-one raises AttributeError when absent
    if run is None or job.status != "running" or run.attempt != job.attempt or not run.pending_reason:
        return None
    return run


def slurm_wait_reason(job) -> str:
    """Slurm's bare reason while it holds ``job`` pending (e.g. "Resources"), else "" (the API's
    ``slurm_pending_reason``). (Status by its value: the model imports this module.)"""
    run = _held(job)
    return run.pending_reason if run else ""


def slurm_queue_position(job) -> int | None:
    """The job's place among its partition's pending jobs in Slurm's priority order (1 = next)."""
    run = _held(job)
    return run.pending_position if run else None


def slurm_held_reason(job) -> str:
    """One sentence: "pending in Slurm (Resources), #2 in partition debug's queue", else ""."""
    run = _held(job)
    if run is None:
        return ""
    partition = job.pool.partition
    where = f"partition {partition}'s queue" if partition else "its partition's queue"
    place = f", #{run.pending_position} in {where}" if run.pending_position else ""
    return f"pending in Slurm ({run.pending_reason}){place}"
