"""End to end behind a password-protected Redis: the worker takes jobs from it and streams live
log lines to it, and the training process it starts sees none of the dashboard's secrets."""
from __future__ import annotations

import subprocess

import pytest

from tests.conftest import RedisServer, redis_binary, wait_for

pytestmark = pytest.mark.slow

PASSWORD = "s3cr@t pass"  # '@' and a space: the URL must quote them and every client unquote them
SECRETS = ("DATABASE_URL", "REDIS_URL", "TRAINHUB_SECRET_KEY", "DJANGO_SETTINGS_MODULE")
ENV_PY = "import os\nfor key in sorted(os.environ):\n    print('ENVKEY', key, flush=True)\n"


class PasswordRedis(RedisServer):
    def start(self) -> None:
        import redis

        self.url = f"redis://:{PASSWORD.replace('@', '%40').replace(' ', '%20')}@127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen([redis_binary(), "--bind", "127.0.0.1", "--port", str(self.port), "--dir",
                                      str(self.dir), "--save", "", "--requirepass", PASSWORD],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: _pings(redis.Redis.from_url(self.url)), timeout=10, interval=0.05, message="redis")


def _pings(client) -> bool:
    import redis

    try:
        return client.ping()
    except redis.ConnectionError:
        return False


@pytest.fixture
def password_redis(tmp_path, live_settings):
    """Everything in this process and the workers it starts points at a Redis with a password."""
    from trainhub.jobs import logs
    from workers.app import app

    server = PasswordRedis(tmp_path)
    server.start()
    live_settings.REDIS_URL = server.url
    app.conf.broker_url = server.url
    app._pool = None
    app.amqp._producer_pool = None
    logs.redis_client.cache_clear()
    yield server
    logs.redis_client.cache_clear()
    server.stop()


def test_a_job_runs_through_a_password_redis_and_its_process_sees_no_secrets(password_redis, start_worker,
                                                                            cpu_pool, user_client, tmp_path):
    import redis

    from trainhub.jobs import logs
    from trainhub.jobs.models import Job
    from trainhub.pools.models import Workspace

    with pytest.raises(redis.AuthenticationError):  # the password is really required
        redis.Redis(port=password_redis.port).xrange("x")
    workspace = tmp_path / "envcheck"
    workspace.mkdir()
    (workspace / "env.py").write_text(ENV_PY)
    Workspace.objects.create(name="envcheck", path=str(workspace))
    start_worker("cpu", extra_env={"TRAINHUB_SECRET_KEY": "a-dashboard-secret-" + "x" * 40})
    spec = {"name": "env-keys", "mode": "script", "script": {"workspace": "envcheck", "entry": "env.py"}}
    response = user_client.post("/api/jobs", spec, content_type="application/json")
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]

    def finished():  # followed meanwhile, as a viewer would: the worker publishes the lines of a followed job
        logs.mark_watched(job_id)
        return (j := Job.objects.get(pk=job_id)).status in ("succeeded", "failed", "cancelled") and j

    job = wait_for(finished, timeout=180, interval=0.5, message="the job to finish")
    lines = [l.text for l in logs.read_lines(job_id, limit=10000)]
    assert job.status == "succeeded", (job.error, lines[-20:])
    keys = {line.split()[1] for line in lines if line.startswith("ENVKEY ")}
    assert keys and "PATH" in keys
    assert not keys & set(SECRETS), keys & set(SECRETS)
    live = logs.redis_client().xrange(logs.stream_key(job_id))  # the live log went through the password
    assert live and any("ENVKEY" in entry[1][b"lines"].decode() for entry in live)
