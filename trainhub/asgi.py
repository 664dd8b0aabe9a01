import os
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.core.signals import request_started
from django.db import close_old_connections, reset_queries
from django.urls import Resolver404, resolve

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
# The web server reuses its database connections (trainhub/settings.py): PostgreSQL's from a pool, and on
# SQLite, which has no pool, each view thread keeps its own; workers and management commands, which keep
# theirs, do not. 0 turns it off.
os.environ.setdefault("TRAINHUB_DB_POOL_SIZE", "20")


class Handler(ASGIHandler):
    """Django's ASGI handler, with one thread hop per request to a sync view instead of one per middleware hook,
    to a thread that lives on.

    Django runs the whole middleware chain in async mode under ASGI, and each of its sync middleware hooks
    (sessions, authentication, CSRF, messages, security headers …) then goes to a thread and back on its own:
    about ten hops for a page or an API call. Only the live log's views are async. A request for any other
    view goes through the same middleware built in sync mode, as under WSGI, in a single hop.

    The hop goes to one of the threads kept for sync views (``TRAINHUB_WEB_THREADS``; a request beyond them
    waits for one), as a threaded WSGI server's workers are, not to a new thread per request as Django's
    thread-sensitive calls make under ASGI. A thread that lives on keeps its database connection from one
    request to the next where nothing pools them (SQLite: opening one and reading the schema again took
    ~0.7 ms of each request, docs/BENCHMARKS.md "Submit latency"). Around each request it does what Django's
    request signals do, which fire in another thread here: ``close_old_connections`` drops a connection that
    failed or outlived CONN_MAX_AGE and has the next use check it, and on PostgreSQL hands it back to the
    pool at the request's end. So Django's own receivers of ``request_started`` are taken off
    (``_application``): they would make a hop of their own to a new thread before every request, ~1 ms
    here, only to find no connection there."""

    def __init__(self):
        super().__init__()
        self._sync = BaseHandler()
        self._sync.load_middleware(is_async=False)
        self._threads = ThreadPoolExecutor(max_workers=settings.TRAINHUB_WEB_THREADS, thread_name_prefix="view")

    async def get_response_async(self, request):
        try:
            view = resolve(request.path_info).func
        except Resolver404:
            view = None  # the 404 page is a sync view
        if view is not None and iscoroutinefunction(view):
            return await super().get_response_async(request)
        return await sync_to_async(self._respond, thread_sensitive=False, executor=self._threads)(request)

    def _respond(self, request):
        reset_queries()
        close_old_connections()
        try:
            return self._sync.get_response(request)
        finally:
            close_old_connections()


def take_request_started() -> None:
    """Take Django's database receivers off ``request_started`` in this process: the web server's views do
    their work in their own threads (``Handler._respond``), and the live log's async views keep their
    connections in aiodb's threads, which manage them. (Django's test client connects
    ``close_old_connections`` again after each request it sends: a test process is not a web server.)"""
    request_started.disconnect(reset_queries)
    request_started.disconnect(close_old_connections)


def _application():
    import django

    django.setup(set_prefix=False)
    take_request_started()
    return Handler()


# Static files (htmx, CSS, charts) are served by the app itself so `make run` needs no proxy.
application = ASGIStaticFilesHandler(_application())
