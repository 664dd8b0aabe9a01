"""Deliver notifications from this process until stopped (for a host that runs no worker)."""
import signal
import threading

from django.core.management.base import BaseCommand

from trainhub.notify.pool import POOL


class Command(BaseCommand):
    help = ("Run a notification delivery pool in the foreground: it sends webhooks and e-mails waiting in the "
            "outbox, including retries that a stopped process left behind. Workers do this already; run it "
            "where none does. Stops on SIGTERM or Ctrl-C.")

    def handle(self, *args, **options):
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        POOL.start()
        self.stdout.write("delivering notifications; Ctrl-C to stop")
        self.stdout.flush()
        stop.wait()
        POOL.stop()
