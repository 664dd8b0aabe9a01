"""Pages for API tokens: list yours, create one (shown once), revoke."""
from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from trainhub.api.models import ApiToken


MAX_EXPIRY_DAYS = 3650


def _tokens(user):
    return ApiToken.objects.filter(user=user).order_by("revoked_at", "-created_at")


@login_required
@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    """GET lists tokens; POST creates one and shows it once (only its digest is stored)."""
    context = {"tokens": _tokens(request.user), "server": request.build_absolute_uri("/").rstrip("/")}
    status = 200
    if request.method == "POST":
        name = request.POST.get("name", "").strip()[:100]
        days = request.POST.get("expires_days", "").strip()
        if not name:
            context["error"] = "Give the token a name, e.g. laptop or ci, so you can tell tokens apart."
            status = 422
        elif ApiToken.objects.filter(user=request.user, name=name, revoked_at__isnull=True).exists():
            context["error"] = (f"You already have a token named “{name}”: pick another name, "
                                f"or revoke that one first, so you can tell them apart.")
            status = 422
        elif days and not (days.isdigit() and 1 <= int(days) <= MAX_EXPIRY_DAYS):
            context["expiry_error"] = (f"Expires in: a whole number of days from 1 to {MAX_EXPIRY_DAYS}, "
                                       "or empty for a token that lasts until revoked.")
            status = 422
        else:
            expires = timezone.now() + timedelta(days=int(days)) if days else None
            token, raw = ApiToken.issue(request.user, name, expires_at=expires)
            context.update(new_token=raw, new_name=token.name, tokens=_tokens(request.user))
            status = 201
    return render(request, "tokens/list.html", context, status=status)


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    if token.revoked_at is None:
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    return redirect("token_list")
