"""The live worker registry: workers announce themselves and send heartbeats."""
from __future__ import annotations

import os
import platform
import logging
import threading

from django.db import close_old_connections
from django.utils import timezone

from trainhub.pools.models import Worker, WorkerPool

log = logging.getLogger(__name__)
HEARTBEAT_SECONDS = int(os.environ.get("TRAINHUB_HEARTBEAT_SECONDS", "10"))


def host_info() -> dict:
    import psutil

    info = {"cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform()}
    return info


def worker_online(hostname: str) -> Worker | None:
    pool_name = os.environ.get("TRAINHUB_POOL", "cpu")
    pool = WorkerPool.objects.filter(name=pool_name).first()
    if pool is None:
        return None
    worker, _ = Worker.objects.update_or_create(
        hostname=hostname,
        defaults={"pool": pool, "started_at": timezone.now(), "last_heartbeat": timezone.now(), "info": host_info()})
    threading.Thread(target=_beat, args=(hostname,), daemon=True, name="trainhub-heartbeat").start()
    return worker


def worker_offline(hostname: str) -> None:
    Worker.objects.filter(hostname=hostname).update(last_heartbeat=timezone.now() - Worker.OFFLINE_AFTER)


def _beat(hostname: str) -> None:
    from trainhub.jobs.lifecycle import jobs_reconcile

    stop = threading.Event()
    while not stop.wait(HEARTBEAT_SECONDS):
        close_old_connections()
        try:
            Worker.objects.filter(hostname=hostname).update(last_heartbeat=timezone.now())
            jobs_reconcile()
        except Exception:  # the database is briefly away: try again next beat
            log.warning("heartbeat of %s failed; retrying", hostname, exc_info=True)


def online_workers(pool: WorkerPool):
    return pool.workers.filter(last_heartbeat__gte=timezone.now() - Worker.OFFLINE_AFTER)


