"""A page or API request that meets a database it cannot reach answers 503 with a Retry-After, not a
500 with a stack trace: the database restarted, the network to it was cut, or the web server's
connection pool found no connection in its timeout (``TRAINHUB_DB_POOL_TIMEOUT``). The live log
stream answers the same itself (``trainhub/jobs/views/stream.py``)."""
from __future__ import annotations

import logging

from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin

log = logging.getLogger(__name__)
MESSAGE = "the database is unreachable; try again in a few seconds"
RETRY_AFTER_SECONDS = 5


class DatabaseUnavailable(MiddlewareMixin):
    """Sync and async capable (MiddlewareMixin), so the live stream's async views stay async."""

    def process_exception(self, request, exception):
        if not isinstance(exception, (OperationalError, InterfaceError)):
            return None
        log.warning("%s %s: %s (%s)", request.method, request.path, MESSAGE, exception)
        if request.path.startswith("/api/"):
            response = JsonResponse({"detail": MESSAGE}, status=503)
        else:
            response = HttpResponse(MESSAGE + "\n", status=503, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
