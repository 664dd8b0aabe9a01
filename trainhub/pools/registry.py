"""The live worker registry: workers announce themselves and send heartbeats."""
from __future__ import annotations

import logging
import os
import platform
import threading
import time
from importlib import metadata

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from trainhub.pools import gpus
from trainhub.pools.models import GangMember, GpuLease, Worker, WorkerPool, offline_after

log = logging.getLogger(__name__)
HEARTBEAT_SECONDS = settings.TRAINHUB_HEARTBEAT_SECONDS


def _version(package: str) -> str | None:
    # From the installed metadata: no import of torch/DeepSpeed needed (and never in the web process).
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def host_info() -> dict:
    import psutil

    return {"cpus": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform(), "host": platform.node(),
            "gpus": gpus.inventory(), "torch": _version("torch"), "deepspeed": _version("deepspeed"),
            "pid": os.getpid()}


def worker_online(hostname: str) -> Worker | None:
    pool_name = os.environ.get("TRAINHUB_POOL", "cpu")
    pool = WorkerPool.objects.filter(name=pool_name).first()
    if pool is None:
        return None
    info = host_info()
    worker, _ = Worker.objects.update_or_create(
        hostname=hostname,
        defaults={"pool": pool, "started_at": timezone.now(), "last_heartbeat": timezone.now(), "info": info,
                  "gpu_count": len(info["gpus"]), "threads": int(os.environ.get("TRAINHUB_WORKER_THREADS", "1"))})
    GangMember.objects.filter(worker=worker, done=False).update(done=True)  # places held by a previous run
    threading.Thread(target=_beat, args=(hostname,), daemon=True, name="trainhub-heartbeat").start()
    return worker


def worker_offline(hostname: str) -> None:
    Worker.objects.filter(hostname=hostname).update(last_heartbeat=timezone.now() - offline_after())


def leases_sweep() -> int:
    """Release GPU leases of finished jobs (a safety net behind every exit path). Queued jobs keep
    theirs: those are a multi-node gang's reservations, let go by its members or its timeout."""
    from trainhub.jobs.models import FINAL

    return GpuLease.objects.filter(job__status__in=FINAL).delete()[0]


def _beat(hostname: str) -> None:
    from trainhub.jobs.lifecycle import DB_ERRORS, drop_connection, jobs_reconcile

    stop = threading.Event()
    failing_since = None
    while not stop.wait(HEARTBEAT_SECONDS):
        try:
            close_old_connections()
            Worker.objects.filter(hostname=hostname).update(last_heartbeat=timezone.now())
            jobs_reconcile()
            leases_sweep()
        except DB_ERRORS as exc:  # the database is briefly away: next beat
            if failing_since is None:  # once per outage, not a traceback every beat
                failing_since = time.monotonic()
                log.warning("heartbeat of %s failed: database unavailable (%s); retrying every %s s",
                            hostname, exc, HEARTBEAT_SECONDS)
            drop_connection()
            continue
        except Exception:  # a bug must not end the heartbeat (the worker would look dead)
            log.exception("heartbeat of %s failed; retrying", hostname)
            continue
        if failing_since is not None:
            log.warning("heartbeat of %s: database back after %.0f s", hostname, time.monotonic() - failing_since)
            failing_since = None


def online_workers(pool: WorkerPool):
    return pool.workers.filter(last_heartbeat__gte=timezone.now() - offline_after())
