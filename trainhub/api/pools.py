"""Worker pools, read-only. Everyone sees the pools they may submit to and their load; staff
see every pool (disabled ones too), queue names and each worker."""
from __future__ import annotations

from django.db.models import Count, Q
from ninja import Router

from trainhub.api.schemas import PoolOut, responses
from trainhub.jobs.models import Status
from trainhub.pools.models import Worker, WorkerPool

router = Router(tags=["pools"])


@router.get("/pools", response=responses({200: list[PoolOut]}), summary="Worker pools and their load")
def list_pools(request):
    staff = request.auth.is_staff
    pools = WorkerPool.objects.annotate(
        queued=Count("jobs", filter=Q(jobs__status=Status.QUEUED)),
        running=Count("jobs", filter=Q(jobs__status__in=[Status.RUNNING, Status.CANCELLING]))
    ).order_by("name")  # explicit: Meta.ordering does not apply to a GROUP BY query
    may_submit = {p.pk: p.user_allowed for p in WorkerPool.objects.for_user(request.auth)}
    if not staff:
        pools = [p for p in pools.filter(enabled=True) if p.accepts_submissions and may_submit.get(p.pk, False)]
    workers: dict[int, list[Worker]] = {}
    for worker in Worker.objects.all():
        workers.setdefault(worker.pool_id, []).append(worker)
    out = []
    for pool in pools:
        mine = workers.get(pool.pk, [])
        row = {"name": pool.name, "kind": pool.kind, "enabled": pool.enabled, "state": pool.state,
               "modes": pool.mode_list or None, "may_submit": may_submit.get(pool.pk, False),
               "description": pool.description,
               "queued": pool.queued, "running": pool.running, "workers_online": sum(w.online for w in mine)}
        if staff:
            row["queue"] = pool.queue
            row["workers"] = [{"hostname": w.hostname, "online": w.online, "last_heartbeat": w.last_heartbeat,
                               "info": w.info} for w in mine]
        out.append(row)
    return out
