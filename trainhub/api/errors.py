"""JSON errors for every failure: ``{"detail": ..., "errors": {field: message}}``; never an HTML 500."""
from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from trainhub.core import unavailable
from workers.runner.config import SpecError

log = logging.getLogger(__name__)

_SOURCES = ("body", "query", "path", "header", "cookie", "form", "file")


def field_errors(errors: list[dict]) -> dict[str, str]:
    """Ninja/pydantic error list -> {dotted field: message}, without the 'body'/'query' prefix."""
    out: dict[str, str] = {}
    for err in errors:
        loc = [str(p) for p in err.get("loc", ())]
        if loc and loc[0] in _SOURCES:
            loc = loc[1:]
        if len(loc) > 1 and loc[0] in ("spec", "payload", "data"):
            loc = loc[1:]
        msg = err.get("msg", "invalid value")
        out.setdefault(".".join(loc) or "body", msg[0].lower() + msg[1:] if msg else "invalid value")
    return out


def install(api: NinjaAPI) -> None:
    @api.exception_handler(SpecError)
    def _spec_error(request, exc: SpecError):
        return api.create_response(request, {"detail": "invalid job spec", "errors": exc.errors}, status=422)

    @api.exception_handler(ValidationError)
    def _validation_error(request, exc: ValidationError):
        errors = field_errors(exc.errors)
        if any(e.get("type") == "json_invalid" or "json" in str(e.get("msg", "")).lower() for e in exc.errors):
            detail = "the request body is not valid JSON"
        else:
            detail = "invalid request: " + "; ".join(f"{k}: {v}" for k, v in errors.items())
        return api.create_response(request, {"detail": detail, "errors": errors}, status=422)

    @api.exception_handler(AuthenticationError)
    def _unauthorized(request, exc):
        response = api.create_response(
            request, {"detail": "not authenticated: send 'Authorization: Bearer TOKEN' (create one at /tokens/)"},
            status=401)
        response["WWW-Authenticate"] = "Bearer"
        return response

    @api.exception_handler(HttpError)
    def _http_error(request, exc: HttpError):
        if exc.status_code == 400 and str(exc).startswith("Cannot parse request body"):
            # ninja's own refusal of a body that is not JSON: same shape as any other input error
            reason = str(exc.__cause__ or "")[:200]
            return api.create_response(
                request, {"detail": f"the request body is not valid JSON: {reason}".rstrip(": "),
                          "errors": {"body": "send a JSON object, e.g. {\"name\": \"digits\"}"}}, status=422)
        return api.create_response(request, {"detail": str(exc)}, status=exc.status_code)

    @api.exception_handler(Http404)
    def _not_found(request, exc):
        return api.create_response(request, {"detail": "not found (or not yours)"}, status=404)

    @api.exception_handler(RequestDataTooBig)
    def _too_big(request, exc):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return api.create_response(request, {"detail": f"the request body is larger than {limit} bytes "
                                                       "(TRAINHUB_MAX_BODY_BYTES); send a smaller body"}, status=413)

    @api.exception_handler(OperationalError)
    @api.exception_handler(InterfaceError)
    def _database_unavailable(request, exc):
        log.warning("%s %s: %s (%s)", request.method, request.path, unavailable.MESSAGE, exc)
        response = api.create_response(request, {"detail": unavailable.MESSAGE}, status=503)
        response["Retry-After"] = str(unavailable.RETRY_AFTER_SECONDS)
        return response

    @api.exception_handler(Exception)
    def _unexpected(request, exc):
        log.exception("API error on %s %s", request.method, request.path)
        return api.create_response(request, {"detail": "internal error; the server log has the details"}, status=500)


def not_found(request, rest: str = ""):
    """Unknown URLs under /api/ answer JSON too, not Django's HTML page."""
    return JsonResponse({"detail": f"no API endpoint at {request.path}; see /api/docs"}, status=404)
