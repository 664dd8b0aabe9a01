"""Storing a job's log: a batch stored again (a retry after an outage whose commit did land, a worker
fenced off mid-batch) keeps every line once and the first text of each. On PostgreSQL the batch goes in
with COPY, which refuses a duplicate; the store then skips the lines already there. Batches of several
jobs that arrive while one is being stored (threads of one worker) go in together, and one that cannot be
stored fails alone. Run on SQLite by default and with DATABASE_URL on PostgreSQL."""
from __future__ import annotations

import threading
import time

import pytest
from django.db import IntegrityError, connection

from trainhub.jobs import logs
from trainhub.jobs.models import Job, LogLine


@pytest.fixture
def job(running_job):
    return running_job


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


class Writers:
    """Threads each storing one batch through ``logs.append_lines``, as a worker's jobs do; the first
    one's store is held inside its transaction until ``release`` so that the others arrive meanwhile."""

    def __init__(self, monkeypatch):
        self.groups: list[list[int]] = []  # the job ids of each transaction
        self.held = threading.Event()
        self.release = threading.Event()
        self.errors: dict[int, BaseException] = {}
        self.threads: list[threading.Thread] = []
        real = logs._insert

        def insert(rows, counts, *, copy):  # the real insert, seen and (the first time) held
            self.groups.append([job_id for _, job_id in counts])
            if len(self.groups) == 1:
                self.held.set()
                assert self.release.wait(30)
            return real(rows, counts, copy=copy)

        monkeypatch.setattr(logs, "_insert", insert)

    def store(self, job_id: int, seqs: range) -> None:
        def run():
            try:
                logs.append_lines(job_id, [(seq, 0, "o", f"job {job_id} line {seq}") for seq in seqs])
            except Exception as exc:  # noqa: BLE001 — what the job's writer would have seen
                self.errors[job_id] = exc
            finally:
                connection.close()

        self.threads.append(threading.Thread(target=run))
        self.threads[-1].start()

    def wait_queued(self, count: int) -> None:
        deadline = time.monotonic() + 30
        while len(logs._GROUP.waiting) < count:
            assert time.monotonic() < deadline, "the batches did not queue behind the one being stored"
            time.sleep(0.01)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(30)
            assert not thread.is_alive()


@pytest.fixture
def jobs(transactional_db, redis_unreachable, user, cpu_pool):
    return [Job.objects.create(owner=user, name=f"store {i}", mode="centralized", pool=cpu_pool, status="running",
                               spec={}) for i in range(4)]


def test_batches_that_arrive_while_another_is_stored_go_in_together(jobs, monkeypatch):
    writers = Writers(monkeypatch)
    writers.store(jobs[0].pk, range(0, 10))
    assert writers.held.wait(30)
    for job in jobs[1:]:
        writers.store(job.pk, range(0, 100))
    writers.wait_queued(3)
    writers.release.set()
    writers.join()

    assert not writers.errors
    assert writers.groups == [[jobs[0].pk], [job.pk for job in jobs[1:]]]  # three jobs, one transaction
    for job, count in zip(jobs, (10, 100, 100, 100)):
        assert list(LogLine.objects.filter(job=job).order_by("seq").values_list("seq", flat=True)) == list(range(count))
        job.refresh_from_db()
        assert job.log_lines == count


def test_a_batch_that_cannot_be_stored_fails_alone_and_the_others_with_it_are_stored(jobs, monkeypatch):
    writers = Writers(monkeypatch)
    writers.store(jobs[0].pk, range(0, 10))
    assert writers.held.wait(30)
    gone = Job.objects.create(owner=jobs[0].owner, name="deleted while printing", mode="centralized",
                              pool=jobs[0].pool, status="running", spec={})
    Job.objects.filter(pk=gone.pk).delete()
    writers.store(jobs[1].pk, range(0, 50))
    writers.store(gone.pk, range(0, 50))
    writers.store(jobs[2].pk, range(0, 50))
    writers.wait_queued(3)
    writers.release.set()
    writers.join()

    assert set(writers.errors) == {gone.pk}
    assert isinstance(writers.errors[gone.pk], IntegrityError)
    assert LogLine.objects.filter(job=jobs[1]).count() == 50
    assert LogLine.objects.filter(job=jobs[2]).count() == 50
    assert not LogLine.objects.filter(job_id=gone.pk).exists()
