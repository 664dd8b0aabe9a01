"""How far back a live-stream client is sent a job's stored log, running or finished.

A client that connects or reconnects (from ``Last-Event-ID`` or ``?after=``) further behind the
newest line than ``TRAINHUB_SSE_FINISHED_LINES`` lines or
``TRAINHUB_SSE_CATCHUP_BYTES`` of text jumps forward: it gets a ``skipped`` event (``{first, last,
older_url}``: the seqs left out and the page that serves them) and then only the newest lines — of a
running job, then its live lines. So one connection reads and sends at most that much backlog, whoever
opens it, however big the log and however often it reconnects; the rest is there a page at a time.
A client already following is never skipped: it sees every line once, a database read at a time.
"""
from __future__ import annotations

import json

from django.conf import settings
from django.db.models.functions import Length
from django.urls import reverse

from trainhub.jobs import logs
from trainhub.jobs.models import LogLine


def catch_up_from(job_id: int, cursor: int) -> int:
    """The cursor a client at ``cursor`` catches up from: ``cursor`` itself when the backlog after it
    is within both bounds, else the seq before the newest lines that are."""
    last = logs.next_seq(job_id) - 1
    start = max(cursor, last - settings.TRAINHUB_SSE_FINISHED_LINES)
    if start >= last:
        return cursor
    budget = settings.TRAINHUB_SSE_CATCHUP_BYTES
    sizes = (LogLine.objects.filter(job_id=job_id, seq__gt=start, seq__lte=last).order_by("-seq")
             .annotate(size=Length("text")).values_list("seq", "size"))
    for seq, size in sizes:  # newest first: the lines that fit in the byte budget
        budget -= size
        if budget < 0:
            start = max(start, seq)
            break
    return start


def skipped_frame(job_id: int, first: int, last: int, rank: int | None, stream: str | None) -> str:
    """The ``skipped`` event for seqs ``first``..``last`` left out."""
    query = "".join(f"&{k}={v}" for k, v in (("rank", rank), ("stream", stream)) if v is not None)
    older = f"{reverse('job_log_page', args=[job_id])}?before={last + 1}{query}"
    return f"event: skipped\ndata: {json.dumps({'first': first, 'last': last, 'older_url': older})}\n\n"
