"""The web app under uvicorn in a subprocess, against the test database, plus an SSE reader.

Used by the live-log tests, the browser test and the benchmarks.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


class AsgiServer:
    def __init__(self, port: int, env: dict, log: Path):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.env = env
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> "AsgiServer":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "trainhub.asgi:application", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", "warning", "--no-access-log"],
            cwd=ROOT, env=self.env, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60  # a loaded 2-core CI machine
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"uvicorn exited: {self.output()[-2000:]}")
            try:
                httpx.get(self.url + "/login", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("uvicorn did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class WebServer(AsgiServer):
    """TrainHub under uvicorn against the test database, ``settings``' Redis and runs directory."""

    def __init__(self, settings, log: Path, **extra_env: str):
        from tests.conftest import database_url, free_port

        env = {**server_env(database_url(), settings.REDIS_URL),
               "TRAINHUB_RUNS_DIR": str(settings.TRAINHUB_RUNS_DIR), **extra_env}
        super().__init__(free_port(), env, log)


@contextlib.contextmanager
def serving(live_settings, log: Path, **extra_env: str):
    """A started ``WebServer``, stopped on leaving."""
    server = WebServer(live_settings, log, **extra_env).start()
    try:
        yield server
    finally:
        server.stop()


def server_env(database_url: str, redis_url: str) -> dict:
    return {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url, "PYTHONUNBUFFERED": "1",
            "TRAINHUB_VAR_DIR": os.environ.get("TRAINHUB_VAR_DIR", str(ROOT / "var"))}


def session_cookie(client) -> dict:
    """The session cookie of a Django test client that has logged in (sessions live in the DB)."""
    from django.conf import settings

    return {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}


LINE_FIELDS = ("seq", "rank", "stream", "text", "html")


def sse_events(response: httpx.Response, *, per_line: bool = True):
    """Yield ``(event, id, data)`` for each event of a streaming httpx response.

    ``per_line`` yields each line of a ``lines`` event on its own, as ``("line", "SEQ", {"seq", "rank",
    "stream", "text"})`` (plus ``"html"`` where the server sent it); without it, events as they came."""
    event, ident, data = "message", None, []
    for raw in response.iter_lines():
        if raw == "":
            if data:
                payload = "\n".join(data)
                payload = json.loads(payload) if payload[:1] in "{[" else payload
                if per_line and event == "lines":
                    for line in payload:
                        yield "line", str(line[0]), dict(zip(LINE_FIELDS, line))
                else:
                    yield event, ident, payload
            event, ident, data = "message", None, []
        elif raw.startswith(":"):
            continue
        else:
            field, _, value = raw.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "id":
                ident = value
            elif field == "data":
                data.append(value)
