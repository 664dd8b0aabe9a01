from trainhub.jobs.views import job_for_user


def job_for(request, job_id: int):
    """The job if the API caller (token or session: ``request.auth``) may see it, else 404."""
    return job_for_user(request.auth, job_id)
