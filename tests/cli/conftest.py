import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.asgi_server import WebServer
from trainhub.api.models import ApiToken


@pytest.fixture
def web_server(live_settings, transactional_db, tmp_path):
    server = WebServer(live_settings, tmp_path / "web.log").start()
    yield server
    server.stop()


@pytest.fixture
def token(user):
    return ApiToken.issue(user, "cli")[1]


@pytest.fixture
def trainhub(web_server, token, tmp_path):
    """Run the installed `trainhub` CLI in a subprocess against the live server."""
    env = {**os.environ, "TRAINHUB_URL": web_server.url, "TRAINHUB_TOKEN": token,
           "TRAINHUB_CONFIG": str(tmp_path / "cli" / "config.json"), "NO_COLOR": "1", "COLUMNS": "200"}

    script = Path(sys.executable).parent / "trainhub"  # the console script `pip install -e .` made
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "trainhub.cli"]

    def run(*args, timeout=60, env_extra=None, input=None):
        return subprocess.run([*argv, *args], cwd=tmp_path, env={**env, **(env_extra or {})},
                              capture_output=True, text=True, timeout=timeout, input=input)

    run.env = env
    return run
