import os

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.urls import Resolver404, resolve

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
# The web server takes its PostgreSQL connections from a pool (trainhub/settings.py); workers and
# management commands, which keep theirs, do not. 0 turns it off.
os.environ.setdefault("TRAINHUB_DB_POOL_SIZE", "20")


class Handler(ASGIHandler):
    """Django's ASGI handler, with one thread hop per request to a sync view instead of one per middleware hook.

    Django runs the whole middleware chain in async mode under ASGI, and each of its sync middleware hooks
    (sessions, authentication, CSRF, messages, security headers …) then goes to a thread and back on its own:
    about ten hops for a page or an API call. Only the live log's views are async. A request for any other
    view goes through the same middleware built in sync mode, as under WSGI, in a single hop to the
    request's thread: the thread Django's own hops would have used, so its database connection and
    request signals are unchanged."""

    def __init__(self):
        super().__init__()
        self._sync = BaseHandler()
        self._sync.load_middleware(is_async=False)

    async def get_response_async(self, request):
        try:
            view = resolve(request.path_info).func
        except Resolver404:
            view = None  # the 404 page is a sync view
        if view is not None and iscoroutinefunction(view):
            return await super().get_response_async(request)
        return await sync_to_async(self._sync.get_response, thread_sensitive=True)(request)


def _application():
    import django

    django.setup(set_prefix=False)
    return Handler()


# Static files (htmx, CSS, charts) are served by the app itself so `make run` needs no proxy.
application = ASGIStaticFilesHandler(_application())
