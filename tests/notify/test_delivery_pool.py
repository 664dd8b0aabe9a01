"""Deliveries run on a fixed set of threads per channel: a bulk cancel of 500 jobs does not open
500 database connections, and a mail server that hangs does not hold up any webhook."""
import os
import socket
import threading
import time

import pytest
from django.conf import settings as django_settings
from django.db import connection

from trainhub.jobs.models import Job
from trainhub.notify import services
from trainhub.notify.models import NotificationDelivery, NotifySettings
from trainhub.runs.lifecycle import Outcome, job_finish

pytestmark = [pytest.mark.usefixtures("allow_local_hooks"), pytest.mark.slow]  # the receivers listen on 127.0.0.1


class ConnectionCounter:
    """Samples, from a thread of its own, the database connections this process holds open: sockets
    to the PostgreSQL server's port, or open handles of the database file on SQLite. Counted on the
    client side because a session the client has closed stays in PostgreSQL's ``pg_stat_activity``
    until its backend has exited: a pool thread that closes its idle connection and opens a new one
    a moment later showed there as two sessions (the peak of 8 where 7 was the most held)."""

    def __init__(self):
        self.peak = 0
        self._stop = threading.Event()
        self._port = None
        self._kind: dict[str, bool] = {}  # socket inode -> whether it is a connection to the database
        if connection.vendor == "postgresql":
            host = connection.settings_dict["HOST"] or ""
            assert not host.startswith("/"), "count over TCP: a unix-socket DATABASE_URL is not sampled here"
            self._port = int(connection.settings_dict["PORT"] or 5432)
        self.baseline = self.count()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _handles(self) -> list[str]:
        out = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                out.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:  # closed while we looked
                pass
        return out

    def _to_database(self, inodes: set[str]) -> None:
        """Learn which of these (new) sockets are TCP connections to the database's port."""
        for inode in inodes:
            self._kind[inode] = False
        for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
            with open(table) as rows:
                next(rows)
                for row in rows:
                    fields = row.split()
                    if fields[9] in inodes and int(fields[2].rsplit(":", 1)[1], 16) == self._port:
                        self._kind[fields[9]] = True

    def count(self) -> int:
        handles = self._handles()
        if self._port is None:
            name = os.path.realpath(django_settings.DATABASES["default"]["NAME"])
            return sum(h == name for h in handles)
        sockets = {h[8:-1] for h in handles if h.startswith("socket:[")}
        new = sockets - self._kind.keys()
        if new:
            self._to_database(new)
        return sum(self._kind[inode] for inode in sockets)

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.count())
            time.sleep(0.005)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def test_a_bulk_cancel_of_500_queued_jobs_delivers_every_hook_over_a_bounded_number_of_connections(
        transactional_db, user, user_client, cpu_pool, receiver, settings):
    hook = receiver(delay=0.02)  # a receiver that takes a moment, so deliveries overlap
    NotifySettings.objects.create(user=user, webhook_url=hook.url, events=["cancelled"])
    Job.objects.bulk_create([Job(owner=user, name=f"queued-{i}", mode="centralized", spec={}, pool=cpu_pool)
                             for i in range(500)])
    ids = list(Job.objects.filter(owner=user).values_list("pk", flat=True))
    connection.ensure_connection()  # the test's own connection, which the cancel below uses: in the baseline
    counter = ConnectionCounter()

    response = user_client.post("/", {"ids": ids})  # the job list's "cancel selected"
    assert response.status_code == 302
    assert services.wait_idle(180)
    peak = counter.stop()
    print(f"connections: baseline {counter.baseline}, peak {peak}")

    assert sorted(r["json"]["id"] for r in hook.requests) == sorted(ids)  # each job's hook, once
    assert NotificationDelivery.objects.filter(status="sent").count() == 500
    pool_size = settings.TRAINHUB_NOTIFY_WEBHOOK_THREADS + settings.TRAINHUB_NOTIFY_EMAIL_THREADS
    # the pool worked in parallel, bounded: the test's own connection (the cancel runs in this thread)
    # plus one per pool thread at most, not a connection per job (500 before the pool)
    # (the baseline is 1 to 3: each channel's polling thread holds a connection while it looks)
    assert 3 <= peak <= 1 + pool_size
    # the receiver's own threads come and go with its requests; ours are the pool, nothing per job
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
