"""A job's pages: list, new, detail, logs, templates and the one live stream.

The two helpers every view of the package uses live here, so there is one of each.
"""
from __future__ import annotations

from django.http import Http404, HttpRequest

from trainhub.jobs.models import Job
from trainhub.jobs.services import jobs_visible_to


def job_for_user(request_or_user, pk) -> Job:
    """The job if this user may see it (own jobs; staff all), else 404 — never 403, so ids don't leak.

    Takes a request (``request.user``) or a user, so the async stream and the API can call it too.
    """
    user = request_or_user.user if isinstance(request_or_user, HttpRequest) else request_or_user
    job = jobs_visible_to(user).filter(pk=pk).first()
    if job is None:
        raise Http404("no such job")
    return job


def int_param(value) -> int | None:
    """A query parameter (or header) as an int; missing, empty or not a number is None, never an error."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
