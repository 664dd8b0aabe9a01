"""Every error under /api/ is JSON: what Django answers before the API sees the request (a 405
from a route's method check, a CSRF refusal, a body over the size limit) is rewritten here."""
from __future__ import annotations

from asgiref.sync import iscoroutinefunction
from django.http import JsonResponse
from django.utils.decorators import sync_and_async_middleware

_DOCS = ("/api/docs",)


def _detail(request, response) -> str:
    status = response.status_code
    if status == 405:
        allowed = response.get("Allow", "")
        return f"method {request.method} is not allowed on {request.path}" + (f"; use {allowed}" if allowed else "")
    if status == 413:
        return "the request body is too large (TRAINHUB_MAX_BODY_BYTES)"
    if status == 403:
        return "forbidden: a session request needs the X-CSRFToken header (or use a Bearer token)"
    return {400: "bad request", 404: "not found"}.get(status, f"HTTP {status}")


def _rewrite(request, response):
    if (request.path.startswith("/api/") and not request.path.startswith(_DOCS) and response.status_code >= 400
            and not response.get("Content-Type", "").startswith("application/json")):
        json_response = JsonResponse({"detail": _detail(request, response)}, status=response.status_code)
        for header in ("Allow", "WWW-Authenticate"):
            if response.has_header(header):
                json_response[header] = response[header]
        return json_response
    return response


@sync_and_async_middleware
def json_api_errors(get_response):
    """Async-capable, so the live log stream's async views are not pushed into a thread."""
    if iscoroutinefunction(get_response):
        async def middleware(request):
            return _rewrite(request, await get_response(request))
    else:
        def middleware(request):
            return _rewrite(request, get_response(request))
    return middleware
