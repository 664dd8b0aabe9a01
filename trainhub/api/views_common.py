from django.shortcuts import get_object_or_404

from trainhub.jobs.services import jobs_visible_to


def job_for(request, job_id: int):
    """The job if the caller may see it (own jobs; staff all), else 404 — never 403, so ids don't leak."""
    return get_object_or_404(jobs_visible_to(request.auth), pk=job_id)
