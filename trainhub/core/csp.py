"""The Content-Security-Policy on every response: scripts, styles, images, fetches and the log stream
come from this server only; no inline script runs (so text that slipped past escaping cannot run),
no plugin, no other site frames the pages, forms post here only.

``'unsafe-eval'``: htmx evaluates its trigger filters (``hx-trigger="every 2s [cond]"``). ``style-src
'unsafe-inline'``: htmx adds its indicator style; a style cannot run code. Inline event handlers are
refused: templates use ``data-confirm`` / ``data-remove-closest``, wired in ``static/js/keys.js``.
"""
from __future__ import annotations

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


def csp_middleware(get_response):
    def middleware(request):
        response = get_response(request)
        response.setdefault("Content-Security-Policy", POLICY)
        return response

    return middleware
