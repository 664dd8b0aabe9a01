"""``{{ job|eta }}``: time left for a running job, from its pace so far (as metrics.json computes it)."""
from __future__ import annotations

from django import template

from trainhub.jobs.models import Status

register = template.Library()


def eta_seconds(job) -> float | None:
    """Elapsed / steps done x steps left; None until the job has run a step (or when it is not running)."""
    if job.status != Status.RUNNING or not job.step or not job.total_steps or not job.started_at:
        return None
    elapsed = job.duration.total_seconds()
    return elapsed / job.step * max(0, job.total_steps - job.step)


@register.filter
def eta(job) -> str:
    seconds = eta_seconds(job)
    if seconds is None:
        return ""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"
