"""The live worker registry: workers announce themselves and send heartbeats.

The heartbeat thread itself lives in ``trainhub.runs.heartbeat``: each beat also recovers
jobs of lost workers, which is running jobs, not inventory."""
from __future__ import annotations

import os
import platform
import socket
from importlib import metadata

from django.conf import settings
from django.utils import timezone

from trainhub.pools import gpus
from trainhub.pools.models import Worker, WorkerPool, offline_after

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


def free_address() -> str:
    """host:port of a free port on this worker, at the address other nodes and sites reach it by
    (``TRAINHUB_WORKER_ADDRESS``, else this host name's): a gang's rendezvous, a lighthouse."""
    host = socket.gethostbyname(settings.TRAINHUB_WORKER_ADDRESS or socket.gethostname())  # an IP
    with socket.socket() as s:
        s.bind(("", 0))
        return f"{host}:{s.getsockname()[1]}"


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
    return worker


def worker_offline(hostname: str) -> None:
    Worker.objects.filter(hostname=hostname).update(last_heartbeat=timezone.now() - offline_after())


def heartbeat(hostname: str) -> None:
    """One beat: this worker is alive now."""
    Worker.objects.filter(hostname=hostname).update(last_heartbeat=timezone.now())


def online_workers(pool: WorkerPool):
    return pool.workers.filter(last_heartbeat__gte=timezone.now() - offline_after())
