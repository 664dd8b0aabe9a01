"""Start a Celery worker bound to one pool's queue (works on any host that reaches the DB and Redis)."""
import os
import socket
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from trainhub.pools.models import WorkerPool

#: seconds a worker thread keeps its database connection between tasks (checked before reuse)
WORKER_CONN_MAX_AGE = 600


class Command(BaseCommand):
    help = "Run a TrainHub worker for a pool: python manage.py runworker --pool cpu"

    def add_arguments(self, parser):
        parser.add_argument("--pool", default="cpu", help="worker pool name (see the admin)")
        parser.add_argument("--slots", type=int, default=0,
                            help="most jobs this worker can ever run at once (its threads; default: the pool's "
                                 "slots per worker, at least 4). The pool's 'job slots per worker', read at every "
                                 "claim, limits it further, so the admin can change slots without a restart")
        parser.add_argument("--name", default="", help="Celery node name (default POOL@HOSTNAME)")
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args, pool, slots, name, loglevel, **options):
        found = WorkerPool.objects.filter(name=pool).first()
        if found is None:
            names = ", ".join(WorkerPool.objects.values_list("name", flat=True)) or "none"
            raise CommandError(f"no pool named {pool!r} (existing: {names}); create it in the admin first")
        if slots < 0:
            raise CommandError("--slots must be at least 1 (or 0 for the default)")
        slots = slots or max(found.slots_per_worker, 4)
        node = name or f"{found.name}@{socket.gethostname()}"
        env = {"TRAINHUB_DB_CONN_MAX_AGE": str(WORKER_CONN_MAX_AGE),
               "TRAINHUB_DB_IDLE_TX_SECONDS": str(settings.TRAINHUB_LEASE_SECONDS), **os.environ, "TRAINHUB_POOL": found.name,
               "TRAINHUB_WORKER_THREADS": str(slots), "REDIS_URL": settings.REDIS_URL}
        argv = [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "-Q", found.queue, "-n", node,
                "--pool", "threads", "-c", str(slots), "--loglevel", loglevel, "--without-gossip",
                "--without-mingle"]
        self.stdout.write(f"worker {node} for pool {found.name} (queue {found.queue}, up to {slots} job(s) at once; "
                          f"pool slots per worker: {found.slots_per_worker})")
        self.stdout.flush()
        os.execve(sys.executable, argv, env)
