"""The Content-Security-Policy on every response: scripts, styles, images, fetches and the log stream
come from this server only; no inline script runs (so text that slipped past escaping cannot run),
no plugin, no other site frames the pages, forms post here only.

``'unsafe-eval'``: htmx evaluates its trigger filters (``hx-trigger="every 2s [cond]"``). ``style-src
'unsafe-inline'``: htmx adds its indicator style; a style cannot run code. Inline event handlers are
refused: templates use ``data-confirm`` / ``data-remove-closest``, wired in ``static/js/keys.js``.
"""
from __future__ import annotations

from asgiref.sync import iscoroutinefunction
from django.utils.decorators import sync_and_async_middleware

POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self' 'unsafe-eval'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])


@sync_and_async_middleware
def csp_middleware(get_response):
    """Async-capable: one sync-only middleware sends every request to an async view (the live log
    streams) through a thread of its own and back, and that thread opens a database connection of
    its own (bench/sse_connect.py)."""
    if iscoroutinefunction(get_response):
        async def middleware(request):
            response = await get_response(request)
            response.setdefault("Content-Security-Policy", POLICY)
            return response
    else:
        def middleware(request):
            response = get_response(request)
            response.setdefault("Content-Security-Policy", POLICY)
            return response
    return middleware
