"""``{% log_panel job %}``: the job page's log section, computed from the request's filters."""
from django import template

from trainhub.jobs.log_views import log_window

register = template.Library()


@register.inclusion_tag("jobs/_log_panel.html", takes_context=True)
def log_panel(context, job):
    request = context["request"]
    return {**log_window(request, job), "request": request, "no_error": request.GET.get("no_error")}
