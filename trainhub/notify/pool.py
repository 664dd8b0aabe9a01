"""The delivery pool: a fixed set of threads per channel in each TrainHub process that delivers.

Webhooks and e-mails have threads of their own (``TRAINHUB_NOTIFY_WEBHOOK_THREADS``,
``TRAINHUB_NOTIFY_EMAIL_THREADS``), so a mail server that hangs never delays a webhook. However
many jobs end at once (a bulk cancel of 500), a process uses at most that many threads and
database connections for notifications; a thread with nothing to do closes its connection.

Every Celery worker starts its pool when it is ready (``NotifyConfig.ready``), and any other
process (the web server after a cancel) starts one the first time it commits a final status.
A pool also polls (``TRAINHUB_NOTIFY_POLL_SECONDS``) for rows it did not write: retries that
another process left behind when it stopped.
"""
from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from trainhub.notify import outbox
from trainhub.notify.models import NotificationDelivery as Delivery

log = logging.getLogger(__name__)
CHANNELS = (Delivery.Channel.WEBHOOK, Delivery.Channel.EMAIL)
DB_ERRORS = (OperationalError, InterfaceError)


def _size(channel: str) -> int:
    name = "TRAINHUB_NOTIFY_WEBHOOK_THREADS" if channel == Delivery.Channel.WEBHOOK else "TRAINHUB_NOTIFY_EMAIL_THREADS"
    return max(1, getattr(settings, name, 4 if channel == Delivery.Channel.WEBHOOK else 2))


class DeliveryPool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._wake = {channel: threading.Event() for channel in CHANNELS}
        # each start's threads get a stop event of their own: a thread that outlived stop()'s wait
        # (a try still hanging) ends after that try even when the pool has been started again since
        self._stop = threading.Event()
        self._busy = 0

    def start(self) -> None:
        with self._lock:
            if any(t.is_alive() for t in self._threads):
                return
            self._stop = threading.Event()
            self._threads = [threading.Thread(target=self._run, args=(channel, i == 0, self._stop), daemon=True,
                                              name=f"notify-{channel}-{i}")
                             for channel in CHANNELS for i in range(_size(channel))]
            for thread in self._threads:
                thread.start()

    def wake(self) -> None:
        """New rows were committed: start the pool if needed and have it look now."""
        self.start()
        for event in self._wake.values():
            event.set()

    def stop(self, timeout: float = 15) -> None:
        """Let tries in flight finish (``timeout`` at most); rows not finished stay in the outbox."""
        with self._lock:
            threads, self._threads = self._threads, []
            self._stop.set()
            for event in self._wake.values():
                event.set()
        for thread in threads:
            thread.join(timeout)

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    @property
    def busy(self) -> int:
        return self._busy

    def _run(self, channel: str, polls: bool, stop: threading.Event) -> None:
        poll = getattr(settings, "TRAINHUB_NOTIFY_POLL_SECONDS", 5.0)
        wake = self._wake[channel]
        try:
            while not stop.is_set():
                try:
                    delivery = outbox.claim(channel)
                    if delivery is not None:
                        wake.set()  # there may be more: let an idle thread of this channel look too
                        self._deliver(delivery, stop)
                        continue
                    # one thread per channel polls; the others sleep until woken (or a minute, or
                    # the poll interval when that is longer: none looks more often than the poller)
                    wait = outbox.seconds_to_next(channel, poll if polls else max(poll, 60.0))
                except DB_ERRORS as exc:  # the database is away: keep the thread, look again later
                    log.warning("notification delivery (%s): database unavailable (%s); looking again in %.0f s",
                                channel, exc, poll)
                    wait = poll
                except Exception:
                    log.exception("notification delivery (%s) failed; looking again in %.0f s", channel, poll)
                    wait = poll
                try:
                    connection.close()  # an idle thread holds no database connection
                except DB_ERRORS:  # a broken connection may fail to close; it is dropped either way
                    pass
                wake.wait(max(wait, 0.02))
                wake.clear()
        finally:
            connection.close()

    def _deliver(self, delivery: Delivery, stop: threading.Event) -> None:
        with self._lock:
            self._busy += 1
        try:
            status = self._record(delivery, outbox.send(delivery), stop)
            if status == Delivery.State.PENDING:
                self._wake[delivery.channel].set()  # a retry is due soon: recompute the wait
        finally:
            with self._lock:
                self._busy -= 1

    @staticmethod
    def _record(delivery: Delivery, outcome, stop: threading.Event) -> str:
        """Store a try's answer. The answer is known once the try is made, so a database that is away
        for a moment (a dropped connection, a locked SQLite file) is tried again while the row is still
        this process's (its claim): a lost answer means the message is sent again once the claim runs
        out, minutes later, and a delivered one arrives twice."""
        pause = 0.25
        while True:
            try:
                return outbox.record(delivery, outcome)
            except DB_ERRORS as exc:
                left = (delivery.claimed_until - timezone.now()).total_seconds() if delivery.claimed_until else 0
                if left <= pause or stop.is_set():
                    raise
                log.warning("delivery %s: could not record its answer (%s): the database is unavailable (%s); "
                            "trying again while the claim lasts (%.0f s)", delivery.pk, outcome.result, exc, left)
                try:
                    connection.close()  # the next try opens a new connection
                except DB_ERRORS:
                    pass
                stop.wait(pause)
                pause = min(2 * pause, 5.0)


POOL = DeliveryPool()
