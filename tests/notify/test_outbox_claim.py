"""The outbox's claim: a row is tried by one thread at a time and never before its backoff ends."""
from datetime import timedelta

from django.utils import timezone

from trainhub.notify import outbox
from trainhub.notify.channels import Result
from trainhub.notify.models import NotificationDelivery as Delivery

FAILED = Result(ok=False, retry=True, http_status=503, result="failed (HTTP 503)", detail="HTTP 503")


def test_a_thread_that_read_a_row_as_due_before_another_tried_it_does_not_try_it_again_before_the_backoff(
        running_job, fast_backoff):
    """The race behind a webhook retried 11 ms after its second try instead of 0.2 s (CI, 2026-12-05):
    thread B reads the row as due, thread A claims it, tries it and records the retry (which sets
    ``claimed_until`` back to NULL), and only then does B's update run. Checking ``claimed_until``
    alone let B take the row; the attempt count, which every claim raises, does not."""
    job = running_job()
    row = Delivery.objects.create(job=job, channel="webhook", target="http://127.0.0.1:9/hook", event="succeeded",
                                  attempts=1, next_attempt_at=timezone.now() - timedelta(seconds=1))
    now = timezone.now()
    read_by_b = outbox.due("webhook", now)
    assert [pk for pk, _, _ in read_by_b] == [row.pk]

    tried_by_a = outbox.claim("webhook")
    assert tried_by_a.pk == row.pk and tried_by_a.attempts == 2
    assert outbox.record(tried_by_a, FAILED) == "pending"

    assert outbox.take(*read_by_b[0], now) is None
    row.refresh_from_db()
    assert row.attempts == 2 and row.claimed_until is None
    assert row.next_attempt_at >= now + timedelta(seconds=0.2)  # 2x the 0.1 s base after the second try
    assert outbox.claim("webhook") is None  # and no one else may take it before then


def test_a_row_whose_claim_ran_out_is_taken_by_the_next_thread_that_reads_it(running_job):
    job = running_job()
    now = timezone.now()
    row = Delivery.objects.create(job=job, channel="webhook", target="http://127.0.0.1:9/hook", event="succeeded",
                                  attempts=1, claimed_until=now - timedelta(seconds=1),
                                  next_attempt_at=now - timedelta(seconds=5))
    taken = outbox.claim("webhook")
    assert taken.pk == row.pk and taken.attempts == 2 and taken.claimed_until > now
