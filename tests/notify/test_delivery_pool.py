"""Deliveries run on a fixed set of threads per channel: a bulk cancel of 500 jobs does not open
500 database connections, and a mail server that hangs does not hold up any webhook."""
import socket
import threading
import time

import pytest
from django.db.backends.signals import connection_created

from tests.conftest import wait_for
from trainhub.jobs.models import Job
from trainhub.notify import services
from trainhub.notify.models import NotificationDelivery, NotifySettings
from trainhub.notify.pool import POOL
from trainhub.runs.lifecycle import Outcome, job_finish

pytestmark = [pytest.mark.usefixtures("allow_local_hooks"), pytest.mark.slow]  # the receivers listen on 127.0.0.1


class ConnectionOpeners:
    """Which threads open a database connection while it listens (Django's ``connection_created``).

    A Django connection belongs to one thread, so the threads that open connections bound how many
    are open at once. Counting open handles or server sessions instead also counted what other
    threads of the test process held — leftovers of earlier tests (5 at the start, in the full
    suite) — and PostgreSQL lists a closed session until its backend exits."""

    def __init__(self):
        self.existing = {t.ident for t in threading.enumerate()}  # threads from before, leftovers included
        self.opened: set[tuple[int, str]] = set()
        connection_created.connect(self._record)

    def _record(self, sender, connection, **kwargs):
        thread = threading.current_thread()
        self.opened.add((thread.ident, thread.name))

    def stop(self) -> None:
        connection_created.disconnect(self._record)

    def new_threads(self) -> set[str]:
        """Threads started while it listened that opened a connection."""
        return {name for ident, name in self.opened if ident not in self.existing}

    def named(self, prefix: str) -> set[str]:
        return {name for _, name in self.opened if name.startswith(prefix)}


def test_a_bulk_cancel_of_500_queued_jobs_delivers_every_hook_over_a_bounded_number_of_connections(
        transactional_db, user, user_client, cpu_pool, receiver, settings):
    hook = receiver(delay=0.02)  # a receiver that takes a moment, so deliveries overlap
    NotifySettings.objects.create(user=user, webhook_url=hook.url, events=["cancelled"])
    Job.objects.bulk_create([Job(owner=user, name=f"queued-{i}", mode="centralized", spec={}, pool=cpu_pool)
                             for i in range(500)])
    ids = list(Job.objects.filter(owner=user).values_list("pk", flat=True))
    openers = ConnectionOpeners()

    response = user_client.post("/", {"ids": ids})  # the job list's "cancel selected"
    assert response.status_code == 302
    assert services.wait_idle(180)
    openers.stop()
    print(f"threads that opened connections: {sorted(name for _, name in openers.opened)}")

    assert sorted(r["json"]["id"] for r in hook.requests) == sorted(ids)  # each job's hook, once
    assert NotificationDelivery.objects.filter(status="sent").count() == 500
    pool_size = settings.TRAINHUB_NOTIFY_WEBHOOK_THREADS + settings.TRAINHUB_NOTIFY_EMAIL_THREADS
    # bounded: no thread (and so no connection) per job — before the pool, 500 threads each opened one
    assert {name for name in openers.new_threads() if not name.startswith("notify-")} == set()
    # the deliveries ran on the pool's threads, in parallel: at most one connection each at a time
    assert 2 <= len(openers.named("notify-")) <= pool_size
    assert len([t for t in threading.enumerate() if t.name.startswith("notify-")]) == pool_size


class HangingMailServer:
    """Accepts SMTP connections and never says hello, like a mail relay that has hung."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


def test_a_hanging_mail_server_does_not_delay_the_webhooks(running_job, receiver, settings):
    server = HangingMailServer()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", server.port, 8
    settings.TRAINHUB_NOTIFY_TRIES = 1
    try:
        hook = receiver()
        NotifySettings.objects.create(user=running_job.owner, webhook_url=hook.url, email=True, events=["failed"])
        jobs = [running_job() for _ in range(3)]  # more e-mails than the e-mail threads
        started = time.monotonic()
        for job in jobs:
            assert job_finish(job, Outcome("failed", 1, "exit code 1"))
        while len(hook.requests) < 3 and time.monotonic() - started < 6:
            time.sleep(0.01)

        assert sorted(r["json"]["id"] for r in hook.requests) == sorted(j.pk for j in jobs)
        assert max(r["at"] for r in hook.requests) - started < 4  # well before the first mail timeout (8 s)
        stuck = NotificationDelivery.objects.filter(channel="email", status="pending")
        assert stuck.exists(), "the e-mails should still be waiting on the mail server"
        assert services.wait_idle(30)
        emails = NotificationDelivery.objects.filter(channel="email")
        assert {(e.status, e.result) for e in emails} == {
            ("failed", "failed: the mail server did not take it (an administrator can see why)")}
    finally:
        server.close()


def test_a_pool_started_again_while_a_try_of_its_last_start_hangs_runs_no_more_threads_than_its_size(
        running_job, receiver, settings):
    """A worker stopping waits for no try (``stop(timeout=0)``); a thread still in a try then must end
    after it, even once the pool has been started again, or the process delivers on one thread more
    than it may — with settings and a connection of its own nobody stops."""
    settings.TRAINHUB_NOTIFY_WEBHOOK_THREADS, settings.TRAINHUB_NOTIFY_EMAIL_THREADS = 1, 1
    settings.TRAINHUB_NOTIFY_POLL_SECONDS = 0.1
    hook = receiver(hold=True)  # the first request hangs until released
    NotifySettings.objects.create(user=running_job.owner, webhook_url=hook.url, events=["failed"])
    assert job_finish(running_job(), Outcome("failed", 1, "exit code 1"))
    wait_for(lambda: hook.requests, timeout=30, message="the first request")

    POOL.stop(timeout=0.2)  # its webhook thread is still waiting for the receiver
    POOL.start()
    hook.release.set()
    assert job_finish(running_job(), Outcome("failed", 1, "exit code 1"))
    wait_for(lambda: NotificationDelivery.objects.filter(status="sent").count() == 2, timeout=30,
             message=lambda: f"both deliveries ({list(NotificationDelivery.objects.values('status', 'result'))})")
    time.sleep(1)  # ten polls: a thread of the first start that went on polling would still be here

    assert sorted(t.name for t in threading.enumerate() if t.name.startswith("notify-")) == [
        "notify-email-0", "notify-webhook-0"]
    assert len(hook.requests) == 2
