"""Metric points stored per job are capped (``TRAINHUB_METRIC_MAX_POINTS``, 500,000 by default).

A job may log new steps forever; past the cap its points are **thinned, not cut off**: every series
keeps its first and last points and every other point in between, so the whole curve — its start and
its latest value, what a Determined or ClearML user looks at — stays on the page at half the density
(TensorBoard, too, keeps a sample of each series rather than its head). The job runs on, new points
are stored again, and the next time it reaches the cap the older part is halved again: the newest
points are the densest. The job's ``metrics_note`` says so, on the page and in ``metrics.json``.
Only where halving cannot help (the points are spread over so many series that each holds one or two)
are further points not stored, and the note says that instead.

The count is kept by the process that stores a job's metrics (its worker), read from the database
once and checked against it again only when it passes the cap, so a batch costs no ``COUNT(*)``.
Halving 500,000 points took 3.3 s on SQLite and 3.4 s on PostgreSQL (2-core machine at load ~5);
it comes once per 250,000 new points of a job, and on SQLite other writers wait for it meanwhile.
"""
from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection

from trainhub.jobs.models import Job, Metric

log = logging.getLogger(__name__)
#: jobs whose counts a process keeps (a worker runs on through many jobs): the least recently
#: stored are forgotten first, and counted again from the database should they store once more
TRACKED_JOBS = 10_000
_POINTS: dict[int, int] = {}  # job id → points stored, as this process counts them (least recent first)
_FULL: dict[int, None] = {}  # jobs whose points cannot be thinned below the cap: no more are stored


def full(job_id: int) -> bool:
    """Whether new points of this job are no longer stored (see the module doc)."""
    return job_id in _FULL


def _remember(table: dict, job_id: int, value) -> None:
    table.pop(job_id, None)
    table[job_id] = value
    while len(table) > TRACKED_JOBS:
        del table[next(iter(table))]


def stored(job_id: int, added: int) -> None:
    """Count ``added`` points just stored for the job; thin its series once it holds more than the cap."""
    cap = settings.TRAINHUB_METRIC_MAX_POINTS
    count = _POINTS.get(job_id)
    count = Metric.objects.filter(job_id=job_id).count() if count is None else count + added
    if count > cap:
        count = Metric.objects.filter(job_id=job_id).count()  # the exact number (retries store nothing twice)
    if count > cap:
        before = count
        while count > cap:
            deleted = thin(job_id)
            count, helped = count - deleted, deleted >= count // 4
            if not helped:  # the series hold one or two points each: halving cannot help
                break
        if count > cap:
            _remember(_FULL, job_id, None)
            note = (f"Metrics capped at {cap:,} points (TRAINHUB_METRIC_MAX_POINTS): spread over too many series "
                    f"to thin, so points logged after that were not stored.")
        else:
            note = (f"Metrics thinned to stay within {cap:,} stored points (TRAINHUB_METRIC_MAX_POINTS): each "
                    f"series keeps its first and last points and every other point of the older ones.")
        Job.objects.filter(pk=job_id).update(metrics_note=note)
        log.warning("job %s: %d metric points over the cap of %d; %d left after thinning", job_id, before, cap, count)
    _remember(_POINTS, job_id, count)


def thin(job_id: int) -> int:
    """Delete every second point of each of the job's series (by step), keeping each one's first and
    last; returns how many were deleted. One statement, on SQLite and PostgreSQL alike."""
    table = connection.ops.quote_name(Metric._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE id IN (SELECT id FROM ("
            f"  SELECT id, ROW_NUMBER() OVER (PARTITION BY name ORDER BY step) AS n,"
            f"         COUNT(*) OVER (PARTITION BY name) AS total FROM {table} WHERE job_id = %s"
            f") AS ranked WHERE n %% 2 = 0 AND n < total)", [job_id])
        return cursor.rowcount
