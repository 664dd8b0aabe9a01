"""A real TrainHub web server (uvicorn, ASGI) in a subprocess, serving the test database."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import ROOT, database_url, free_port


class WebServer:
    def __init__(self, settings, log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.env = {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": settings.REDIS_URL,
                    "TRAINHUB_RUNS_DIR": str(settings.TRAINHUB_RUNS_DIR), "PYTHONUNBUFFERED": "1",
                    "TRAINHUB_VAR_DIR": os.environ.get("TRAINHUB_VAR_DIR", str(ROOT / "var"))}
        self.proc: subprocess.Popen | None = None

    def start(self) -> "WebServer":
        argv = [sys.executable, "-m", "uvicorn", "trainhub.asgi:application", "--host", "127.0.0.1",
                "--port", str(self.port), "--log-level", "warning", "--timeout-graceful-shutdown", "2"]
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=open(self.log, "ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the web server exited: {self.output()[-2000:]}")
            try:
                httpx.get(self.url + "/login", timeout=2)
                return self
            except httpx.TransportError:
                time.sleep(0.2)
        raise RuntimeError(f"the web server did not answer: {self.output()[-2000:]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
