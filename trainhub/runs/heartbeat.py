"""A worker's heartbeat thread: every beat shows the worker alive (pools' registry) and
recovers what lost workers left behind (jobs whose lease expired, cross-site places whose worker
is gone, GPU leases of finished jobs).

Any worker may do the recovery; every step is a compare-and-set, so concurrent workers
cannot double-handle a job.
"""
from __future__ import annotations

import logging
import threading
import time

from django.db import close_old_connections

from trainhub.jobs import retention
from trainhub.jobs.models import FINAL
from trainhub.pools import registry
from trainhub.pools.models import Worker
from trainhub.runs import crosssite
from trainhub.runs.lifecycle import DB_ERRORS, drop_connection, jobs_reconcile
from trainhub.runs.models import GangMember, GpuLease

log = logging.getLogger(__name__)


def worker_start(hostname: str) -> Worker | None:
    """Register this worker in its pool, let go of the gang places a previous run of it held,
    and start its heartbeat. None (and no heartbeat) when its pool does not exist."""
    worker = registry.worker_online(hostname)
    if worker is None:
        return None
    GangMember.objects.filter(worker=worker, done=False).update(done=True)
    threading.Thread(target=_beat, args=(hostname,), daemon=True, name="trainhub-heartbeat").start()
    return worker


def leases_sweep() -> int:
    """Release GPU leases of finished jobs (a safety net behind every exit path). Queued jobs keep
    theirs: those are a multi-node gang's reservations, let go by its members or its timeout."""
    return GpuLease.objects.filter(job__status__in=FINAL).delete()[0]


def _beat(hostname: str) -> None:
    stop = threading.Event()
    failing_since = None
    while not stop.wait(registry.HEARTBEAT_SECONDS):
        try:
            close_old_connections()
            registry.heartbeat(hostname)
            jobs_reconcile()
            crosssite.places_reconcile()  # a cross-site job's site whose worker is gone: another takes it
            leases_sweep()
            retention.prune_if_due()  # TRAINHUB_LOG_RETENTION_DAYS: hourly, a bounded batch
        except DB_ERRORS as exc:  # the database is briefly away: next beat
            if failing_since is None:  # once per outage, not a traceback every beat
                failing_since = time.monotonic()
                log.warning("heartbeat of %s failed: database unavailable (%s); retrying every %s s",
                            hostname, exc, registry.HEARTBEAT_SECONDS)
            drop_connection()
            continue
        except Exception:  # a bug must not end the heartbeat (the worker would look dead)
            log.exception("heartbeat of %s failed; retrying", hostname)
            continue
        if failing_since is not None:
            log.warning("heartbeat of %s: database back after %.0f s", hostname, time.monotonic() - failing_since)
            failing_since = None
