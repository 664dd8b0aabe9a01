"""Worker pools, read-only. Everyone sees enabled pools and their load; staff also see
disabled pools, queue names and each worker."""
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
        running=Count("jobs", filter=Q(jobs__status__in=[Status.RUNNING, Status.CANCELLING])))
    if not staff:
        pools = pools.filter(enabled=True)
    workers: dict[int, list[Worker]] = {}
    for worker in Worker.objects.all():
        workers.setdefault(worker.pool_id, []).append(worker)
    out = []
    for pool in pools:
        mine = workers.get(pool.pk, [])
        row = {"name": pool.name, "kind": pool.kind, "enabled": pool.enabled, "description": pool.description,
               "queued": pool.queued, "running": pool.running, "workers_online": sum(w.online for w in mine)}
        if staff:
            row["queue"] = pool.queue
            row["workers"] = [{"hostname": w.hostname, "online": w.online, "last_heartbeat": w.last_heartbeat,
                               "info": w.info} for w in mine]
        out.append(row)
    return out
