"""Each site of a cross-site job: its pool, its state and restarts, and its last sync (outer
step, participants, bytes, time). The job page's Sites panel (a partial of ``jobs/detail.html``,
sent on the page's one live stream like the other sections, ``views/live.py``), the API's job
(``sites``) and the CLI's ``trainhub status`` all show these rows.

Each site's state is written by its worker on its places' ``GangMember`` rows (reached here
through ``job.gang_members``: the runs package sits above this one); its sync metrics are the
job's ``sync_*`` metrics, named ``<pool>/sync_*`` for every site but the first.
"""
from __future__ import annotations

import math

from django.db.models import Max, Sum
from django.utils import timezone

from trainhub.jobs.models import Job, Metric

SYNC = ("sync_outer_step", "sync_participants", "sync_bytes", "sync_seconds")
#: a site's state when its nodes differ: the worst one shows
WORST = ("failed", "lost", "running", "finished", "")


def _prefixes(spec) -> list[str]:
    return [""] + [f"{site.pool}/" for site in spec.sites[1:]]


def _site_members(job: Job, spec) -> list[list]:
    """Each site's places (gang members), site by site: the members whose worker is of the site's
    pool (each pool holds one site). A Slurm site is one place whatever its nodes."""
    members = job.gang_members.filter(attempt=job.attempt).select_related("worker__pool")
    return [[m for m in members if m.worker.pool.name == site.pool] for site in spec.sites]


def sites_key(job: Job):
    """What the panel shows changes only when this does (None: not a cross-site job)."""
    spec = job.spec_model
    if not spec.sites:
        return None
    members = tuple(job.gang_members.filter(attempt=job.attempt).order_by("node_rank")
                    .values_list("node_rank", "site_state", "restarts", "restart_at"))
    names = [p + n for p in _prefixes(spec) for n in SYNC]
    last = Metric.objects.filter(job_id=job.pk, name__in=names).aggregate(m=Max("pk"))["m"]
    return job.status, members, last


def site_rows(job: Job) -> list[dict]:
    """One row per site of a cross-site job (empty for any other job)."""
    spec = job.spec_model
    if not spec.sites:
        return []
    prefixes = _prefixes(spec)
    names = [p + n for p in prefixes for n in SYNC]
    last_pks = Metric.objects.filter(job_id=job.pk, name__in=names).values("name").annotate(pk=Max("pk"))
    latest = {m.name: m for m in Metric.objects.filter(pk__in=[row["pk"] for row in last_pks])}
    totals = dict(Metric.objects.filter(job_id=job.pk, name__in=[p + "sync_seconds" for p in prefixes])
                  .values("name").annotate(total=Sum("value")).values_list("name", "total"))
    rows = []
    for site, prefix, mine in zip(spec.sites, prefixes, _site_members(job, spec)):
        state = min((m.site_state for m in mine), key=WORST.index, default="")
        restart_at = max((m.restart_at for m in mine if m.restart_at), default=None)
        mark = max((m.metric_mark for m in mine), default=0)
        outer, peers = latest.get(prefix + "sync_outer_step"), latest.get(prefix + "sync_participants")
        # healed: a sync with a peer since it started again (alone, it had no one to heal from)
        synced = outer is not None and outer.pk > mark
        rows.append({
            "pool": site.pool, "state": _state(job, state, restart_at, max((m.restarts for m in mine), default=0),
                                               synced=synced, healed=synced and peers is not None and peers.value > 1),
            "restarts": max((m.restarts for m in mine), default=0), "max_restarts": spec.max_restarts,
            "outer_step": _value(latest, prefix + "sync_outer_step"),
            "participants": _value(latest, prefix + "sync_participants"),
            "bytes": _value(latest, prefix + "sync_bytes"),
            "last_sync_seconds": _value(latest, prefix + "sync_seconds"),
            "sync_seconds": totals.get(prefix + "sync_seconds"),
        })
    return rows


def _value(latest: dict, name: str):
    metric = latest.get(name)
    return None if metric is None else metric.value


def _state(job: Job, state: str, restart_at, restarts: int, synced: bool, healed: bool) -> str:
    if state == "failed":
        return "failed for good"
    if state == "lost":
        if not job.is_active:
            return "lost"
        if restart_at is None:  # its worker is gone (``runs.crosssite.places_reconcile``)
            return "lost, waiting for another worker of its pool"
        seconds = max(0, math.ceil((restart_at - timezone.now()).total_seconds()))
        return f"lost, restarting in {seconds} s"
    if state == "finished":
        return "finished"
    if state == "running":
        if not job.is_active:
            return "stopped"
        if restarts:
            if healed:
                return "healed"
            return "restarted, syncing alone (no peer to heal from)" if synced else "restarted, rejoining at the next sync"
        return "running"
    return "waiting for its worker" if job.is_active else "did not start"
