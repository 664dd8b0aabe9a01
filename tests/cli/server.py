"""A real TrainHub web server (uvicorn, ASGI) in a subprocess, serving the test database."""
from __future__ import annotations

from pathlib import Path

from tests.asgi_server import AsgiServer, server_env
from tests.conftest import database_url, free_port


class WebServer(AsgiServer):
    def __init__(self, settings, log: Path):
        env = {**server_env(database_url(), settings.REDIS_URL), "TRAINHUB_RUNS_DIR": str(settings.TRAINHUB_RUNS_DIR)}
        super().__init__(free_port(), env, log)
