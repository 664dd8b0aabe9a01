"""A worker keeps its threads' database connections from one job to the next (checked before each
reuse): a new PostgreSQL connection is a backend process with cold caches, ~7 ms on the way from
submit to running (docs/BENCHMARKS.md, "Submit latency")."""
import time

import pytest
from django.db import connection

from tests.conftest import wait_for
from trainhub.jobs.models import Job
from trainhub.jobs.services import job_submit

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql",
                                reason="counts PostgreSQL's sessions (pg_stat_database); SQLite has no server")
TINY = {"data": {"dataset": "iris"}, "model": {"name": "logreg"}, "train": {"epochs": 1}}


def _sessions() -> int:
    """Sessions ever opened to the test database, as PostgreSQL's statistics count them (reported within ~1 s)."""
    time.sleep(1.5)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def run(user, name: str) -> None:
    job = job_submit(owner=user, data={**TINY, "name": name})
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(), timeout=120,
                    message=f"job {name} to end")
    assert done.status == "succeeded", done.error


def test_a_worker_runs_job_after_job_without_opening_a_connection_for_each(start_worker, cpu_pool, user):
    # its notification threads reconnect at each look; with a 600 s poll none looks during the count
    # (the threads that do not poll used to look every 60 s whatever the poll: 16 sessions once, loaded)
    start_worker("cpu", extra_env={"TRAINHUB_NOTIFY_POLL_SECONDS": "600"})
    run(user, "warm-up")  # the worker's threads open their connections
    before = _sessions()
    for i in range(5):
        run(user, f"job-{i}")
    opened = _sessions() - before
    # before: 15 (the claiming thread reconnected at every task's start and end: three a job). Fewer than one
    # a job now: the notification delivery threads still connect when a finished job wakes them and close when
    # idle (0369dfb), so under load a few sessions open beside the jobs (4 seen in a loaded clean-clone run)
    assert opened < 5, f"{opened} new database sessions while the worker ran 5 jobs"
