"""Why a Slurm pool's job waits, in Slurm's own words: its ``Reason`` while the batch job is
PENDING (Priority, Resources, QOSMaxJobsPerUserLimit …), kept on the job's ``SlurmRun`` row by
the worker following it (``workers.slurm_execution``). Separate from the reasons a job waits in
TrainHub's own queue, so that the two explanations can be shown side by side or merged."""
from __future__ import annotations


def slurm_wait_reason(job) -> str:
    """Slurm's reason while it holds ``job`` pending (e.g. "Resources"), else "". (Status by its
    value: the model imports this module, and jobs' modules import one another without circles.)"""
    run = getattr(job, "slurm_run", None)  # the reverse one-to-one raises AttributeError when absent
    if run is None or job.status != "running" or run.attempt != job.attempt:
        return ""
    return run.pending_reason
