"""A Slurm pool's jobs outlive the worker that submitted them: the batch job runs on the cluster
whatever happens to the worker. When that worker stops renewing a job's lease (killed, its host
restarted), the job is not requeued as for a local pool — that would start a second Slurm job
beside the first — but *adopted*: a worker of the pool takes the lease over and follows the same
Slurm job again (``workers.slurm_execution``), its log resuming where the stored lines end.

Adoption is asked for with a message on the pool's queue (``ADOPT_TASK``), sent

- by a worker as it starts, for the jobs its previous run held (same node name), at once;
- by the reconcile of any worker's heartbeat, for a job whose lease expired.

The message's task takes the lease with a compare-and-set (``job_adopt``): duplicates are no-ops.
"""
from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db.models import F, Q
from django.utils import timezone

from trainhub.jobs.models import Job, Status
from trainhub.pools.models import Worker, WorkerPool
from trainhub.runs.models import SlurmRun

log = logging.getLogger(__name__)
ADOPT_TASK = "trainhub.adopt_slurm_job"
RUNNING = (Status.RUNNING, Status.CANCELLING)
#: an Outcome's status when the worker let go of a running Slurm job (shutting down): no final status
DETACHED = "detached"


def followed(job: Job) -> SlurmRun | None:
    """The Slurm job of ``job``'s current attempt, if one was submitted."""
    return SlurmRun.objects.filter(job_id=job.pk, attempt=job.attempt).first()


def send_adopt(job: Job) -> bool:
    """Ask a worker of the job's pool to follow its Slurm job again; False if the broker is away."""
    from workers.app import app

    try:
        app.send_task(ADOPT_TASK, args=[job.pk, job.lease_token], queue=job.pool.queue)
    except Exception:  # the broker is down: the next reconcile sends it again
        log.exception("could not ask for job %s to be adopted", job.pk)
        return False
    log.info("job %s: its worker is gone; asked a worker of pool %s to follow its Slurm job again",
             job.pk, job.pool.name)
    return True


def adopt_lost(job: Job) -> bool:
    """For the reconcile: a Slurm pool's job whose lease expired is adopted, not requeued. True
    when that is so (a message is on its way, at most once per lease period); False when the job
    has no Slurm job to follow (its worker died before ``sbatch`` answered): recover it as usual."""
    if job.pool.kind != WorkerPool.Kind.SLURM or followed(job) is None:
        return False
    if cache.add(f"trainhub:slurm-adopt:{job.pk}:{job.lease_token}", 1, timeout=settings.TRAINHUB_LEASE_SECONDS):
        send_adopt(job)
    return True


def adopt_on_start(hostname: str) -> int:
    """A worker starting: adopt at once what its previous run (same node name) held in a Slurm pool."""
    jobs = Job.objects.select_related("pool").filter(status__in=RUNNING, pool__kind=WorkerPool.Kind.SLURM,
                                                     worker__hostname=hostname)
    return sum(send_adopt(job) for job in jobs if followed(job) is not None)


def job_adopt(job_id: int, lease_token: int, *, hostname: str) -> Job | None:
    """Compare-and-set: take over the lease ``lease_token`` of a running Slurm job whose worker is
    gone (its lease expired, or it was this worker's own previous run). The job with its new
    lease, or None when another worker took it, it ended, or its worker is still alive."""
    worker = Worker.objects.filter(hostname=hostname).first()
    if worker is None:
        return None
    now = timezone.now()
    gone = Q(lease_expires_at__lt=now) | Q(worker__hostname=hostname)
    taken = (Job.objects.filter(gone, pk=job_id, lease_token=lease_token, status__in=RUNNING)
             .update(lease_token=F("lease_token") + 1, worker=worker,
                     lease_expires_at=now + timedelta(seconds=settings.TRAINHUB_LEASE_SECONDS)))
    if not taken:
        return None
    return Job.objects.select_related("pool").get(pk=job_id)


def job_detach(job: Job) -> bool:
    """The worker following ``job`` shuts down and leaves its Slurm job running: end its lease now
    so that the next worker of the pool (or this one, restarted) adopts it without waiting."""
    return bool(Job.objects.filter(pk=job.pk, lease_token=job.lease_token, status__in=RUNNING)
                .update(lease_expires_at=timezone.now()))
