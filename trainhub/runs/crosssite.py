"""Scheduling a cross-site job: every site's nodes are places of one gang (``gang.py``).

A cross-site job (``sites`` in its spec) is enqueued on every site's pool. A worker of one of
those pools takes the next free place of its site; the places are numbered site by site
(site 0's nodes first), so place 0 is site 0's first node: the job's leader, which records the
job's log and outcome and runs the job's lighthouse. The job starts when every place is taken
(``gang.gang_wait``), or fails after the gang timeout naming the sites still missing. Each
site's first node also records a c10d rendezvous for the site's own torchrun.

A site on a pool whose backend places the nodes itself (Slurm: one batch job whatever its
number of nodes) is one place, taken by one worker of that pool, which submits the site.

A place other than 0 whose worker is gone (no heartbeat for a lease period, or it started
again and let its places go) is handed to another worker of its site's pool while the job runs
on (``places_reconcile``, from any worker's heartbeat; a message on the pool's queue,
``TAKEOVER_TASK``; ``take_over`` is the compare-and-set). It counts as one of the site's
restarts; past them the job fails. Place 0's worker gone is the job's expired lease: the job is
retried as a whole (``lifecycle.jobs_reconcile``).
"""
from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from trainhub.jobs.models import Job, Status
from trainhub.pools.models import Worker, WorkerPool
from trainhub.pools.registry import free_address
from trainhub.runs.lifecycle import Outcome, job_finish
from trainhub.runs.models import GangMember, GpuLease

log = logging.getLogger(__name__)
TAKEOVER_TASK = "trainhub.take_site_place"


def places(spec) -> list[tuple[int, int]]:
    """(site, node within the site) of every place of the gang, in place order; a site whose
    pool's backend places its nodes (Slurm) has one place, node 0."""
    placed = backend_placed(spec)
    return [(i, node) for i, site in enumerate(spec.sites) for node in range(1 if site.pool in placed else site.nodes)]


def backend_placed(spec) -> set[str]:
    """The pools of ``spec``'s sites whose backend starts all of a site's nodes from one place (Slurm)."""
    return set(WorkerPool.objects.filter(name__in=[s.pool for s in spec.sites], kind=WorkerPool.Kind.SLURM)
               .values_list("name", flat=True))


def site_of(spec, place: int) -> tuple[int, int]:
    return places(spec)[place]


def join(job: Job, worker: Worker, gpus: list[int]) -> GangMember | None:
    """Take the first free place of this worker's site; None when the site is full (or raced)."""
    spec = job.spec_model
    mine = [p for p, (site, _) in enumerate(places(spec)) if spec.sites[site].pool == worker.pool.name]
    try:
        with transaction.atomic():
            taken = set(GangMember.objects.filter(job=job, attempt=job.attempt).values_list("node_rank", flat=True))
            free = [p for p in mine if p not in taken]
            if not free or not Job.objects.filter(pk=job.pk, status=Status.QUEUED, attempt=job.attempt).exists():
                return None
            place = free[0]
            site, node = site_of(spec, place)
            member = GangMember.objects.create(
                job=job, attempt=job.attempt, worker=worker, node_rank=place, lease_token=job.lease_token + 1,
                address=free_address() if node == 0 and spec.sites[site].nodes > 1 and worker.pool.backend == "local"
                else "",
                lighthouse=f"http://{free_address()}" if place == 0 else "")
            GpuLease.objects.bulk_create([GpuLease(worker=worker, index=i, job_id=job.pk,
                                                   lease_token=job.lease_token + 1) for i in gpus])
            return member
    except IntegrityError:  # another worker took this place, a GPU, or already holds a place
        return None


def launch_kwargs(member: GangMember, spec) -> dict:
    """torchrun's arguments for this member's node of its site (empty: a one-node site)."""
    site, node = site_of(spec, member.node_rank)
    nodes = spec.sites[site].nodes
    if nodes == 1 or spec.sites[site].pool in backend_placed(spec):  # Slurm's allocation gives the rendezvous
        return {}
    first = places(spec).index((site, 0))
    leader = GangMember.objects.get(job_id=member.job_id, attempt=member.attempt, node_rank=first)
    return {"nnodes": nodes, "node_rank": node, "rdzv_endpoint": leader.address,
            "rdzv_id": f"job{member.job_id}-{member.attempt}-site{site}"}


def lighthouse_address(member: GangMember) -> str:
    return GangMember.objects.get(job_id=member.job_id, attempt=member.attempt, node_rank=0).lighthouse


def missing(job: Job, joined: list[GangMember]) -> str:
    """The gang timeout's reason for a cross-site job: which sites lacked workers."""
    spec = job.spec_model
    taken = {m.node_rank for m in joined}
    short = {}
    for place, (site, _) in enumerate(places(spec)):
        if place not in taken:
            short[spec.sites[site].pool] = short.get(spec.sites[site].pool, 0) + 1
    sites = ", ".join(f"site {pool} lacks {n} worker(s)" for pool, n in short.items())
    return f"cross-site gang timeout: {sites}; start workers in those pools or lower their sites' nodes"


def _gone(now) -> Q:
    """A place's worker is gone: no heartbeat for a lease period, or it started again (a worker
    lets go of its earlier run's places as it starts, ``heartbeat.worker_start``)."""
    return Q(worker__last_heartbeat__lt=now - timedelta(seconds=settings.TRAINHUB_LEASE_SECONDS)) | Q(done=True)


def places_reconcile(now=None) -> int:
    """For any worker's heartbeat: hand every place (not 0) of a running cross-site job whose worker
    is gone to another worker of its site's pool, at most once per lease period; fail the job when
    the site's restarts are used up. Returns how many places were handed over or failed."""
    now = now or timezone.now()
    orphaned = (GangMember.objects.filter(_gone(now), job__status=Status.RUNNING, job__attempt=F("attempt"),
                                          job__lease_expires_at__gte=now, node_rank__gt=0,
                                          site_state__in=("", "running", "lost"))
                .select_related("job__pool", "worker"))
    handled = 0
    for member in orphaned[:100]:
        if cache.add(f"trainhub:site-takeover:{member.pk}:{member.worker_id}:{member.restarts}", 1,
                     timeout=settings.TRAINHUB_LEASE_SECONDS):
            handled += _hand_over(member)
    return handled


def _hand_over(member: GangMember) -> bool:
    job, spec = member.job, member.job.spec_model
    site, _ = site_of(spec, member.node_rank)
    pool = WorkerPool.objects.get(name=spec.sites[site].pool)
    why = f"its worker {member.worker.hostname} {'stopped' if member.done else 'stopped heart-beating'}"
    mine = GangMember.objects.filter(pk=member.pk, worker_id=member.worker_id)
    if member.restarts >= spec.max_restarts:
        mine.update(site_state="failed", restart_at=None)
        return job_finish(job, Outcome(Status.FAILED, None, f"site {pool.name} failed for good: {why}, and its "
                                                            f"{spec.max_restarts} restart(s) are used up"))
    from workers.app import app  # by task name: the web side never imports the tasks

    mine.update(site_state="lost", restart_at=None)
    try:
        app.send_task(TAKEOVER_TASK, args=[job.pk, member.attempt, member.node_rank, member.worker_id, member.restarts],
                      queue=pool.queue)
    except Exception:  # the broker is away: the next reconcile after the lease period sends it again
        log.exception("job %s: could not ask pool %s to take over place %s", job.pk, pool.name, member.node_rank)
        return False
    log.info("job %s: site %s lost (%s); asked another worker of pool %s to take its place",
             job.pk, pool.name, why, pool.name)
    return True


def take_over(job_id: int, attempt: int, place: int, old_worker_id: int, restarts: int,
              worker: Worker, gpus: list[int]) -> GangMember | None:
    """Compare-and-set: ``worker`` takes ``place`` from ``old_worker_id``, which is gone (or is this
    worker's own earlier run), as one of the site's restarts. None when another worker took it,
    the job moved on, or this worker already holds another place of the job."""
    now = timezone.now()
    try:
        with transaction.atomic():
            job = Job.objects.filter(pk=job_id, attempt=attempt, status=Status.RUNNING).first()
            if job is None:
                return None
            taken = (GangMember.objects.filter(_gone(now) | Q(worker=worker), job_id=job_id, attempt=attempt,
                                               node_rank=place, worker_id=old_worker_id, restarts=restarts)
                     .update(worker=worker, done=False, restarts=F("restarts") + 1, restart_at=None, joined_at=now))
            if not taken:
                return None
            member = GangMember.objects.get(job_id=job_id, attempt=attempt, node_rank=place)
            GpuLease.objects.filter(worker_id=old_worker_id, job_id=job_id).delete()
            GpuLease.objects.bulk_create([GpuLease(worker=worker, index=i, job_id=job_id,
                                                   lease_token=member.lease_token) for i in gpus])
            return member
    except IntegrityError:  # this worker holds another place of the job, or a GPU was taken
        return None
