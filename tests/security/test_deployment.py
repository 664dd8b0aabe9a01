"""Deployment: the production settings of README "Production" pass `check --deploy`; Redis
URLs with a password or TLS reach Celery and the Redis clients intact."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

from tests.conftest import ROOT

PRODUCTION = {"TRAINHUB_SECRET_KEY": secrets.token_urlsafe(50), "TRAINHUB_ALLOWED_HOSTS": "trainhub.example.com",
              "TRAINHUB_SECURE": "1"}
TLS_URL = "rediss://:s3cr%40t@redis.example.com:6390/2?ssl_cert_reqs=required"


def manage(tmp_path, *args, **env):
    # Not this test process's settings: TRAINHUB_* of the suite, nor the async escape hatch
    # that the browser tests set (check --deploy rightly refuses it).
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("TRAINHUB_") and k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**base, "TRAINHUB_VAR_DIR": str(tmp_path), **env})


def assert_stopped_with_one_line(result, expected: str) -> None:
    """``manage`` failed with one line (deprecation notes aside) saying ``expected``, and no traceback."""
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip() and "deprecated" not in line]
    assert len(lines) == 1 and expected in lines[0], result.stderr


def test_check_deploy_has_no_warnings_under_the_production_settings(tmp_path):
    result = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout and "WARNING" not in result.stderr, result.stderr


def readme_production_env() -> dict:
    """The `export NAME=value` lines of README's "Production" section (the service URLs aside)."""
    import re
    import shlex

    section = (ROOT / "README.md").read_text().split("## Production", 1)[1].split("\n## ", 1)[0]
    env = {}
    for name, value in re.findall(r"^export (\w+)=(.*)$", section, re.M):
        if name in ("DATABASE_URL", "REDIS_URL"):
            continue  # no such hosts here; the URL forms are tested below
        env[name] = secrets.token_urlsafe(50) if "$(" in value else shlex.split(value, comments=True)[0]
    return env


def test_the_production_settings_in_the_readme_pass_check_deploy(tmp_path):
    env = readme_production_env()
    assert {"TRAINHUB_SECRET_KEY", "TRAINHUB_ALLOWED_HOSTS", "TRAINHUB_SECURE"} <= set(env)
    result = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", **env)
    assert result.returncode == 0, result.stdout + result.stderr


def test_without_trainhub_secure_check_deploy_names_what_is_missing(tmp_path):
    env = {k: v for k, v in PRODUCTION.items() if k != "TRAINHUB_SECURE"}
    result = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", **env)
    assert result.returncode != 0
    for warning in ("W004", "W008", "W012", "W016"):  # HSTS, SSL redirect, secure cookies
        assert f"security.{warning}" in result.stderr


def test_a_password_and_tls_redis_url_reaches_celery_intact(tmp_path):
    code = ("import json; from workers.app import app; c = app.connection_for_write(); "
            "print(json.dumps([app.conf.broker_url, c.password, c.hostname, c.port, c.virtual_host, bool(c.ssl)]))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "REDIS_URL": TLS_URL})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [TLS_URL, "s3cr@t", "redis.example.com", 6390,
                                                                   "2", True]


def test_a_password_and_tls_redis_url_reaches_the_log_clients_intact(settings):
    import redis
    import redis.asyncio as aioredis

    from trainhub.jobs import logs

    settings.REDIS_URL = TLS_URL
    logs.redis_client.cache_clear()
    try:
        for client in (logs.redis_client(), aioredis.Redis.from_url(settings.REDIS_URL)):
            kwargs = client.connection_pool.connection_kwargs
            assert kwargs["password"] == "s3cr@t" and kwargs["host"] == "redis.example.com"
            assert kwargs["port"] == 6390 and kwargs["db"] == 2
            assert "SSL" in client.connection_pool.connection_class.__name__
        assert isinstance(logs.redis_client(), redis.Redis)
    finally:
        logs.redis_client.cache_clear()
