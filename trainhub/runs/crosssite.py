"""Scheduling a cross-site job: every site's nodes are places of one gang (``gang.py``).

A cross-site job (``sites`` in its spec) is enqueued on every site's pool. A worker of one of
those pools takes the next free place of its site; the places are numbered site by site
(site 0's nodes first), so place 0 is site 0's first node: the job's leader, which records the
job's log and outcome and runs the job's lighthouse. The job starts when every place is taken
(``gang.gang_wait``), or fails after the gang timeout naming the sites still missing. Each
site's first node also records a c10d rendezvous for the site's own torchrun.

A site on a pool whose backend places the nodes itself (Slurm: one batch job whatever its
number of nodes) is one place, taken by one worker of that pool, which submits the site.
"""
from __future__ import annotations

from django.db import IntegrityError, transaction

from trainhub.jobs.models import Job, Status
from trainhub.pools.models import Worker, WorkerPool
from trainhub.pools.registry import free_address
from trainhub.runs.models import GangMember, GpuLease


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
