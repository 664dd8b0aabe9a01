"""Storing a job's log: a batch stored again (a retry after an outage whose commit did land, a worker
fenced off mid-batch) keeps every line once and the first text of each. On PostgreSQL the batch goes in
with COPY, which refuses a duplicate; the store then skips the lines already there. Run on SQLite by
default and with DATABASE_URL on PostgreSQL."""
from __future__ import annotations

import pytest

from trainhub.jobs import logs
from trainhub.jobs.models import Job, LogLine


@pytest.fixture
def job(user, cpu_pool, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # publishing is best effort; the database is what counts here
    logs.redis_client.cache_clear()
    yield Job.objects.create(owner=user, name="store", mode="centralized", pool=cpu_pool, status="running", spec={})
    logs.redis_client.cache_clear()


def test_a_batch_stored_again_keeps_every_line_once(job):
    logs.append_lines(job.pk, [(seq, 0, "o", f"first {seq}") for seq in range(10)])
    logs.append_lines(job.pk, [(seq, 1, "e", f"again {seq}") for seq in range(5, 15)])  # 5..9 again, 10..14 new

    stored = list(LogLine.objects.filter(job=job).order_by("seq").values_list("seq", "rank", "stream", "text"))
    assert [row[0] for row in stored] == list(range(15))
    assert stored[9] == (9, 0, "o", "first 9")  # the line stored first is kept as it was
    assert stored[10] == (10, 1, "e", "again 10")
    job.refresh_from_db()
    assert job.log_lines == 15


def test_a_batch_after_a_gap_is_stored_whole(job):
    logs.append_lines(job.pk, [(seq, 0, "o", f"line {seq}") for seq in range(3)])
    logs.append_lines(job.pk, [(seq, 0, "o", f"line {seq}") for seq in range(3, 2003)])
    assert LogLine.objects.filter(job=job).count() == 2003
    assert logs.tail_lines(job.pk, 1)[0].text == "line 2002"
