"""TrainHub settings. Every knob comes from the environment (see README, "Configuration")."""
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from trainhub.core.clientip import parse_trusted_proxies
from trainhub.core.private import private_file, tighten
from trainhub.env import envbool, envfloat, envint, envstr, renamed

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("TRAINHUB_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = envbool("TRAINHUB_DEBUG", False)
SECRET_KEY = envstr("TRAINHUB_SECRET_KEY")
if not SECRET_KEY:
    # A stable per-installation key, so sessions survive restarts without configuration.
    import secrets

    key_file = VAR_DIR / "secret_key"
    if not private_file(key_file, secrets.token_urlsafe(50)):
        tighten(key_file)
    SECRET_KEY = key_file.read_text().strip()

ALLOWED_HOSTS = [h.strip() for h in envstr("TRAINHUB_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in envstr("TRAINHUB_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "ninja",  # /api/docs serves Swagger UI from ninja's own static files, not a CDN
    "template_partials",
    "trainhub.core",
    "trainhub.pools",
    "trainhub.jobs",
    "trainhub.runs",
    "trainhub.api",
    "trainhub.notify",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "trainhub.api.middleware.json_api_errors",  # every /api/ error is JSON, a 405 too
    "trainhub.core.csp.csp_middleware",
    "trainhub.core.unavailable.DatabaseUnavailable",  # a database error in a view: 503, not 500
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "trainhub.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]
ASGI_APPLICATION = "trainhub.asgi.application"

DATABASE_URL = envstr("DATABASE_URL", f"sqlite:///{VAR_DIR / 'trainhub.sqlite3'}")
try:
    # The web server (ASGI) reuses its connections: on PostgreSQL from a pool, on SQLite each of its view threads
    # keeps one (TRAINHUB_DB_POOL_SIZE below). A worker
    # (`manage.py runworker` sets TRAINHUB_DB_CONN_MAX_AGE) keeps each of its long-lived threads'
    # connections between tasks, checked before reuse: a new connection costs ~1 ms on SQLite and
    # ~7 ms on PostgreSQL (a backend process, cold caches), on the way from submit to running.
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=envint("TRAINHUB_DB_CONN_MAX_AGE", 0),
                                                  conn_health_checks=True)}
except Exception as exc:  # dj_database_url raises several types for a bad URL
    raise ImproperlyConfigured(f"DATABASE_URL={DATABASE_URL!r} is not a database URL: {exc}") from None
DB_IDLE_TX_SECONDS = envint("TRAINHUB_DB_IDLE_TX_SECONDS", 0)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and DB_IDLE_TX_SECONDS:
    # A worker frozen inside a transaction (a paused VM, SIGSTOP) must not hold its row and index locks past
    # its lease: the worker taking the job over would wait on them. PostgreSQL ends such a session after this
    # long (`manage.py runworker` sets it to the lease); the frozen worker meets a closed connection when it
    # wakes and takes the outage path, and its late lines are refused by seq.
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = (
        f"-c idle_in_transaction_session_timeout={DB_IDLE_TX_SECONDS * 1000}")
DB_POOL_SIZE = envint("TRAINHUB_DB_POOL_SIZE", 0, minimum=0)
#: the web server's threads for sync views (trainhub/asgi.py)
TRAINHUB_WEB_THREADS = envint("TRAINHUB_WEB_THREADS", 12, minimum=1)
if (DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and DB_POOL_SIZE
        and not DATABASES["default"]["CONN_MAX_AGE"]):
    # The web server (`trainhub/asgi.py` sets TRAINHUB_DB_POOL_SIZE) takes its connections from a psycopg pool
    # instead of opening one per request (a backend process and its cold caches: ~10 ms of a page on PostgreSQL).
    # Each connection is checked as it is taken (CONN_HEALTH_CHECKS), so one the database dropped is replaced.
    # While the database is away a request waits at most `timeout` for a connection and then fails with a
    # database error (the pages' 503s); the pool's reconnect attempts give up after `reconnect_timeout` and the
    # next request starts new ones, so it connects again within a few seconds of the database's return.
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": min(2, DB_POOL_SIZE), "max_size": DB_POOL_SIZE, "name": "trainhub",
        "timeout": envfloat("TRAINHUB_DB_POOL_TIMEOUT", 5.0, minimum=0.1), "reconnect_timeout": 5.0}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # The tests' database is one per test run, as the SQLite pass's file is (below): two runs against one server
    # (two clones' `make test`, or a hand-run test while `make test`'s PostgreSQL pass runs) otherwise share
    # pytest-django's test_<NAME>, and the second run's create or drop breaks the first one's tests.
    DATABASES["default"].setdefault("TEST", {}).setdefault("NAME", f"test_{DATABASES['default']['NAME']}_{os.getpid()}")
    # Parameters bound by the server, not spliced into the SQL text by Python, and a statement that one
    # connection runs five times is prepared there: PostgreSQL plans it once instead of at every run (the
    # claim's first look: 1.0 -> 0.4 ms; submit -> running 21.7 -> 19.8 ms, docs/BENCHMARKS.md). Behind a
    # pooler that cannot keep prepared statements (PgBouncer in transaction mode before 1.21), append
    # `?server_side_binding=false` to DATABASE_URL: Django's default, no prepared statements.
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options.setdefault("server_side_binding", True)
    if _options["server_side_binding"] is True:
        _options.setdefault("prepare_threshold", 5)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    if DB_POOL_SIZE and not DATABASES["default"]["CONN_MAX_AGE"]:
        # No pool for SQLite: the web server's view threads (trainhub/asgi.py) keep their connections instead
        DATABASES["default"]["CONN_MAX_AGE"] = 600
    # WAL and a busy timeout let the web server and workers share one SQLite file.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not memory, so that real worker processes in the tests share the test database.
    # One file per test run, so that concurrent runs never share it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
    # SQLite creates a missing file with the umask's mode (world-readable): an empty one, 0600, is a
    # new database to it, and its -wal and -shm files take the database file's mode
    if DATABASES["default"]["NAME"] and DATABASES["default"]["NAME"] != ":memory:":
        if not private_file(Path(DATABASES["default"]["NAME"])):
            for suffix in ("", "-wal", "-shm"):
                tighten(Path(f"{DATABASES['default']['NAME']}{suffix}"))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Unset means the embedded Redis that `make run` starts on this port.
REDIS_URL = envstr("REDIS_URL", "redis://127.0.0.1:6380/0")

# Counters of failed log-ins (trainhub/core/login.py). The database is the one store that every
# web process already shares and that survives a Redis restart; the table is made by `migrate`
# (trainhub/core/migrations) and by the test database setup. See docs/SECURITY.md.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "trainhub_cache"}}
TRAINHUB_LOGIN_MAX_FAILURES = envint("TRAINHUB_LOGIN_MAX_FAILURES", 10, minimum=1)
TRAINHUB_LOGIN_WINDOW_SECONDS = envint("TRAINHUB_LOGIN_WINDOW_SECONDS", 300, minimum=1)
# failures for one username from all addresses together (a guesser spread over many addresses)
TRAINHUB_LOGIN_MAX_ACCOUNT_FAILURES = envint("TRAINHUB_LOGIN_MAX_ACCOUNT_FAILURES", 50, minimum=1)
# Reverse proxies whose X-Forwarded-For is believed (trainhub/core/clientip.py): comma-separated
# IPs and CIDRs; empty trusts nobody and the client is REMOTE_ADDR. See docs/SECURITY.md.
TRAINHUB_TRUSTED_PROXIES = parse_trusted_proxies(envstr("TRAINHUB_TRUSTED_PROXIES", ""))

# Production behind a TLS-terminating proxy (README, "Production"): `check --deploy` is clean.
TRAINHUB_SECURE = envbool("TRAINHUB_SECURE", False)
if TRAINHUB_SECURE:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = True
    SECURE_HSTS_SECONDS = envint("TRAINHUB_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("TRAINHUB_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = envbool("TRAINHUB_HSTS_PRELOAD", True)
    # The proxy must set (and overwrite) X-Forwarded-Proto, else every request looks like http.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "job_list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = envstr("TRAINHUB_TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"

DATA_UPLOAD_MAX_MEMORY_SIZE = envint("TRAINHUB_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)

# Notifications (trainhub/notify, docs/NOTIFICATIONS.md): links in webhooks and e-mails point here;
# e-mail goes through Django's SMTP settings (unset EMAIL_HOST: localhost:25).
TRAINHUB_BASE_URL = envstr("TRAINHUB_BASE_URL", "http://127.0.0.1:8000")
EMAIL_BACKEND = envstr("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = envstr("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = envstr("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = envstr("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = envbool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "trainhub@localhost")
# Deliveries (docs/NOTIFICATIONS.md): tries per message, the first wait between them (doubling),
# the webhook timeout, threads per channel and process, how often a process looks for retries
# others left behind, and how long a try may hold a row before another process takes it over.
TRAINHUB_NOTIFY_TRIES = envint("TRAINHUB_NOTIFY_TRIES", 5, minimum=1)
TRAINHUB_NOTIFY_BACKOFF_SECONDS = envfloat("TRAINHUB_NOTIFY_BACKOFF_SECONDS", 1.0, minimum=0)
TRAINHUB_NOTIFY_TIMEOUT_SECONDS = envfloat("TRAINHUB_NOTIFY_TIMEOUT_SECONDS", 10, minimum=1)
TRAINHUB_NOTIFY_WEBHOOK_THREADS = envint("TRAINHUB_NOTIFY_WEBHOOK_THREADS", 4, minimum=1)
TRAINHUB_NOTIFY_EMAIL_THREADS = envint("TRAINHUB_NOTIFY_EMAIL_THREADS", 2, minimum=1)
TRAINHUB_NOTIFY_POLL_SECONDS = envfloat("TRAINHUB_NOTIFY_POLL_SECONDS", 5, minimum=0.1)
TRAINHUB_NOTIFY_CLAIM_SECONDS = envfloat("TRAINHUB_NOTIFY_CLAIM_SECONDS", 120, minimum=1)
# Webhooks go to public addresses only; these networks (IPs or CIDRs, comma-separated) are
# allowed as well, for internal hooks, e.g. 10.20.0.0/16,127.0.0.1.
TRAINHUB_WEBHOOK_ALLOWED_NETWORKS = parse_trusted_proxies(envstr("TRAINHUB_WEBHOOK_ALLOWED_NETWORKS", ""),
                                                          "TRAINHUB_WEBHOOK_ALLOWED_NETWORKS")

# Where job run directories (logs, events, checkpoints, artifacts) live on worker hosts.
TRAINHUB_RUNS_DIR = Path(envstr("TRAINHUB_RUNS_DIR", str(VAR_DIR / "runs")))
# Seconds a running job's lease lasts without a renewal from its worker.
TRAINHUB_LEASE_SECONDS = envint("TRAINHUB_LEASE_SECONDS", 30, minimum=5)
# Seconds a job gets between SIGTERM and SIGKILL (cancel, timeout, a lost worker) to write its
# last checkpoint. One value for the worker, the job's guard and the runner, which get it in
# their environment from the executor. The three old names still work, with a warning.
TRAINHUB_GRACE_SECONDS = envint(renamed("TRAINHUB_GRACE_SECONDS", "TRAINHUB_KILL_GRACE_SECONDS",
                                        "TRAINHUB_GUARD_GRACE_SECONDS", "TRAINHUB_STOP_GRACE_S"), 15, minimum=0)
# Times a job may be put back in the queue through no fault of its own (its worker shut down or
# was lost) before a lost worker fails it: a job that kills its machine would otherwise loop forever.
TRAINHUB_MAX_INTERRUPTIONS = envint("TRAINHUB_MAX_INTERRUPTIONS", 10, minimum=0)
# Workers: seconds between heartbeats; a worker silent for TRAINHUB_OFFLINE_SECONDS is shown offline.
TRAINHUB_HEARTBEAT_SECONDS = envint("TRAINHUB_HEARTBEAT_SECONDS", 10, minimum=1)
TRAINHUB_OFFLINE_SECONDS = envint("TRAINHUB_OFFLINE_SECONDS", 60, minimum=1)
# Seconds a multi-node job waits for all its nodes after the first joins (docs/POOLS.md).
TRAINHUB_GANG_TIMEOUT_SECONDS = envfloat("TRAINHUB_GANG_TIMEOUT_SECONDS", 120, minimum=0)
#: the address other nodes and sites reach this worker at (a rendezvous, a lighthouse, a site's store);
#: "" = this host name's address. Set it to the overlay's (VPN, WireGuard) address between sites.
TRAINHUB_WORKER_ADDRESS = envstr("TRAINHUB_WORKER_ADDRESS", "")
#: a cross-site job's lost site starts again after this pause (its peers sync without it meanwhile)
TRAINHUB_SITE_RESTART_SECONDS = envfloat("TRAINHUB_SITE_RESTART_SECONDS", 5, minimum=0)
# Log lines kept per job of each pool, e.g. "gpu=5000000,*=0" (trainhub/jobs/retention.py parses it);
# on by default: a million lines per job (the first 1,000 and the newest), "*=0" keeps everything.
TRAINHUB_LOG_RETENTION = envstr("TRAINHUB_LOG_RETENTION", "*=1000000")
# Bytes of one job attempt's output stored (database, Redis); beyond it a marker, the rest dropped. 0 = no cap.
TRAINHUB_LOG_MAX_BYTES = envint("TRAINHUB_LOG_MAX_BYTES", 100 * 1024 * 1024, minimum=0)
# Bytes a job's run directory may hold on disk (checked by its worker; past it the job fails). 0 = no cap.
TRAINHUB_RUN_DIR_MAX_BYTES = envint("TRAINHUB_RUN_DIR_MAX_BYTES", 0, minimum=0)
# Size of a sandboxed job's private /tmp, a tmpfs (memory; not counted against the cap above, it goes
# with the job). 0 = the kernel's default, half the host's memory (workers/sandbox.py).
TRAINHUB_SANDBOX_TMP_BYTES = envint("TRAINHUB_SANDBOX_TMP_BYTES", 4 * 1024 ** 3, minimum=0)
# Live log streams (SSE) per web process: open per user, open in all, and the seconds one stays open
# before the browser reconnects (transparently, from Last-Event-ID).
TRAINHUB_SSE_MAX_PER_USER = envint("TRAINHUB_SSE_MAX_PER_USER", 24, minimum=1)
TRAINHUB_SSE_MAX_STREAMS = envint("TRAINHUB_SSE_MAX_STREAMS", 2000, minimum=1)
TRAINHUB_SSE_MAX_SECONDS = envint("TRAINHUB_SSE_MAX_SECONDS", 3600, minimum=1)
# A finished job's log over the live stream: at most its newest this many lines per connection, the
# rest announced by a ``skipped`` event and served a page at a time (trainhub/jobs/views/stream.py).
TRAINHUB_SSE_FINISHED_LINES = envint("TRAINHUB_SSE_FINISHED_LINES", 5000, minimum=1)
# ... and of a running one too: a client that catches up gets at most that many lines and this many
# characters of backlog per catch-up (trainhub/jobs/views/catchup.py).
TRAINHUB_SSE_CATCHUP_BYTES = envint("TRAINHUB_SSE_CATCHUP_BYTES", 8 * 1024 * 1024, minimum=65536)
# Metric points stored per job; past it each series is thinned to every other point (first and last
# kept) and the page and API say so (trainhub/jobs/metriccap.py).
TRAINHUB_METRIC_MAX_POINTS = envint("TRAINHUB_METRIC_MAX_POINTS", 500_000, minimum=1000)
# Days a finished job keeps its log lines; older logs are deleted by the workers' hourly sweep or
# `manage.py prune_logs`, the job, its status and metrics kept (trainhub/jobs/retention.py). 0 = forever.
TRAINHUB_LOG_RETENTION_DAYS = envint("TRAINHUB_LOG_RETENTION_DAYS", 0, minimum=0)
# Memory of one web process for live logs: recent text kept per job (its hub), and rendered frames
# shared by all viewers; past them lines come from the database again (trainhub/jobs/views/stream.py).
TRAINHUB_SSE_JOB_BUFFER_BYTES = envint("TRAINHUB_SSE_JOB_BUFFER_BYTES", 8 * 1024 * 1024, minimum=65536)
TRAINHUB_SSE_FRAME_CACHE_BYTES = envint("TRAINHUB_SSE_FRAME_CACHE_BYTES", 64 * 1024 * 1024, minimum=65536)
# A job watched by this many viewers or more in one web process wakes them at most once per this many
# milliseconds, with all lines since (fewer, larger writes); fewer viewers are woken per Redis read.
TRAINHUB_SSE_COALESCE_VIEWERS = envint("TRAINHUB_SSE_COALESCE_VIEWERS", 20, minimum=1)
TRAINHUB_SSE_COALESCE_MS = envint("TRAINHUB_SSE_COALESCE_MS", 100, minimum=1, maximum=1000)
# `make run` (trainhub/pools/management/commands/up.py).
TRAINHUB_HOST = envstr("TRAINHUB_HOST", "127.0.0.1")
TRAINHUB_PORT = envint("TRAINHUB_PORT", 8000, minimum=1, maximum=65535)
TRAINHUB_EMBEDDED_REDIS_PORT = envint("TRAINHUB_EMBEDDED_REDIS_PORT", 6380, minimum=1, maximum=65535)
TRAINHUB_ADMIN_PASSWORD = envstr("TRAINHUB_ADMIN_PASSWORD")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("TRAINHUB_LOG_LEVEL", "INFO")},
}
