"""A webhook receiver on 127.0.0.1 that answers with scripted status codes, and running jobs."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


#: what a hostile or internal service might say; the owner must never see it
BANNER = "SSH-2.0-OpenSSH_9.2 internal-db-7 ready"


class Receiver:
    def __init__(self, codes: list[int], delay: float = 0.0, tls=None, hold: bool = False):
        self.codes = list(codes)  # answers for the first requests; 200 after that
        self.delay = delay  # seconds each answer takes
        self.release = threading.Event()  # hold=True: no answer until the test sets it
        if not hold:
            self.release.set()
        self.requests: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                code = receiver.codes.pop(0) if receiver.codes else 200
                receiver.requests.append({"at": time.monotonic(), "path": self.path, "headers": dict(self.headers),
                                          "json": json.loads(body), "code": code})
                time.sleep(receiver.delay)
                receiver.release.wait(timeout=300)
                self.send_response(code, None if code == 200 else BANNER)
                self.end_headers()
                self.wfile.write(b"ok" if code == 200 else BANNER.encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:  # an ssl.SSLContext for the server side
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made: list[Receiver] = []

    def make(codes=(), delay=0.0, tls=None, hold=False):
        made.append(Receiver(list(codes), delay, tls, hold))
        return made[-1]

    yield make
    for r in made:
        r.release.set()
        r.close()


@pytest.fixture
def allow_local_hooks(settings):
    """The receivers here listen on 127.0.0.1, which webhooks may not reach by default (SSRF): allow
    it the way an administrator allows an internal network."""
    settings.TRAINHUB_WEBHOOK_ALLOWED_NETWORKS = ("127.0.0.0/8",)
    return settings


@pytest.fixture(autouse=True)
def _stop_the_delivery_pool():
    """Each test starts with no delivery threads left over from the one before."""
    yield
    from trainhub.notify.pool import POOL

    POOL.stop()


@pytest.fixture
def fast_backoff(settings):
    settings.TRAINHUB_NOTIFY_BACKOFF_SECONDS = 0.1
    return settings


@pytest.fixture
def running_job(transactional_db, django_user_model, cpu_pool):
    """A job a worker holds (lease token 1), ready for ``job_finish``."""
    from trainhub.jobs.models import Job, Status
    from django.utils import timezone

    owner = django_user_model.objects.create_user("bob", email="bob@example.test", password="x" * 12)

    def make(spec=None, **fields):
        fields = {"status": Status.RUNNING, "lease_token": 1, "started_at": timezone.now(), **fields}
        return Job.objects.create(owner=owner, name="digits", mode="centralized", spec=spec or {}, pool=cpu_pool,
                                  **fields)

    make.owner = owner
    return make
