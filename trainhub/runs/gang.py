"""Gang scheduling of multi-node jobs: all N nodes start together, or none does.

Each worker that joins holds a slot and its GPU leases while the job is still ``queued``.
When the N-th member joins, one member starts the job (compare-and-set ``queued →
running``, the rank-0 worker recorded as the job's worker) and every member launches its
node of torchrun with c10d rendezvous on rank 0's address. If the gang is not complete
within ``TRAINHUB_GANG_TIMEOUT_SECONDS`` of the first join, the job fails with the reason
and every member lets go: no process was started, no GPU stays held.
"""
from __future__ import annotations

import threading
import time

from django.conf import settings
from django.utils import timezone

from trainhub.jobs.models import Job, Status
from trainhub.runs.lifecycle import job_claim
from trainhub.runs.models import GangMember

POLL_SECONDS = 0.3


def gang_timeout() -> float:
    return settings.TRAINHUB_GANG_TIMEOUT_SECONDS


def gang_wait(member: GangMember, nodes: int, *, task_id: str = "", stop: threading.Event | None = None) -> Job | str:
    """Block until this attempt's gang has started (the running ``Job``) or will not (the reason)."""
    members = GangMember.objects.filter(job_id=member.job_id, attempt=member.attempt)
    while True:
        job = Job.objects.select_related("pool").get(pk=member.job_id)
        if job.attempt != member.attempt:
            return "the job moved on to another attempt"
        if job.status in (Status.RUNNING, Status.CANCELLING):
            return job if job.lease_token == member.lease_token else "the job was started by someone else"
        if job.status != Status.QUEUED:
            return f"the job is {job.status}"
        joined = list(members.select_related("worker"))
        if len(joined) >= nodes:
            leader = next(m for m in joined if m.node_rank == 0)
            job_claim(job.pk, job.attempt, hostname=leader.worker.hostname, task_id=task_id)  # all have joined
            continue
        first = min(m.joined_at for m in joined) if joined else timezone.now()
        if (timezone.now() - first).total_seconds() > gang_timeout():
            reason = (f"gang timeout: only {len(joined)} of {nodes} workers of pool {job.pool.name} could take the "
                      f"job within {gang_timeout():.0f} s; free workers or lower resources.nodes")
            if job.spec_model.sites:
                from trainhub.runs import crosssite

                reason = crosssite.missing(job, joined) + f" (waited {gang_timeout():.0f} s)"
            job.transition(Status.FAILED, reason=reason, expect=Status.QUEUED, error=reason)
            return reason
        if stop is not None and stop.is_set():
            return "the worker is shutting down"
        time.sleep(POLL_SECONDS)


def leader_address(member: GangMember) -> str:
    return GangMember.objects.get(job_id=member.job_id, attempt=member.attempt, node_rank=0).address
