from django import template

from trainhub.runs.scheduling import queue_position as _queue_position

register = template.Library()


@register.simple_tag
def queue_position(job) -> int | None:
    """``{% queue_position job as pos %}``: 1 = next to start in its pool; None unless queued."""
    return _queue_position(job)
