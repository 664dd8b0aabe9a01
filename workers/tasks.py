"""Celery tasks: thin. Load the job, claim it, hand it to the executor, record the outcome."""
from __future__ import annotations

import logging

import django

django.setup()

from celery.signals import worker_ready, worker_shutdown, worker_shutting_down  # noqa: E402

from trainhub.jobs.lifecycle import Outcome, job_claim, job_finish  # noqa: E402
from trainhub.jobs.models import Status  # noqa: E402
from trainhub.pools import registry  # noqa: E402
from workers import executor  # noqa: E402
from workers.app import app  # noqa: E402

log = logging.getLogger(__name__)


@app.task(name="trainhub.run_job", bind=True)
def run_job(self, job_id: int, attempt: int = 1) -> str:
    job = job_claim(job_id, attempt, hostname=self.request.hostname or "", task_id=self.request.id or "")
    if job is None:
        return "skipped: not queued for this attempt (cancelled, or already claimed)"
    try:
        outcome = executor.execute(job)
    except Exception as exc:  # the executor itself broke: record it, never leave the job running
        log.exception("executor failed for job %s", job_id)
        outcome = Outcome(Status.FAILED, None, f"worker error: {exc}")
    job_finish(job, outcome)
    return outcome.status


@worker_ready.connect
def _register(sender, **_):
    registry.worker_online(getattr(sender, "hostname", ""))


@worker_shutting_down.connect
def _stop_jobs(**_):
    executor.SHUTDOWN.set()


@worker_shutdown.connect
def _unregister(sender, **_):
    registry.worker_offline(getattr(sender, "hostname", ""))
