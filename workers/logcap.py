"""A job's log bounded by bytes: after ``TRAINHUB_LOG_MAX_BYTES`` of its output in one attempt, further
lines are counted, not stored (database, Redis Stream), and one line says where the log was cut. The job
keeps running; what it writes to its run directory is its own. Lines stay bounded on their own
(``workers.lines.MAX_LINE``), so one line cannot go far past the cap."""
from __future__ import annotations

from django.conf import settings

MB = 1024 * 1024


class ByteCap:
    def __init__(self, limit: int | None = None):
        self.limit = settings.TRAINHUB_LOG_MAX_BYTES if limit is None else limit  # 0: no cap
        self.used = 0
        self.cut = False

    def admit(self, items: list[tuple[int, str]]) -> tuple[list[tuple[int, str]], str | None]:
        """The lines of ``items`` within the cap, and the marker line once, when the cap is reached."""
        if self.cut:
            return [], None
        if not self.limit:
            return items, None
        for i, (_rank, text) in enumerate(items):
            self.used += len(text.encode("utf-8", "replace")) + 1
            if self.used > self.limit:
                self.cut = True
                return items[:i], (f"trainhub: log truncated at {self.limit:,} bytes ({self.limit / MB:.1f} MB, "
                                   "TRAINHUB_LOG_MAX_BYTES); "
                                   "the job keeps running but its further output is not stored")
        return items, None
