"""A job's events file (``events.jsonl``, written by the runner) → metrics and progress."""
from __future__ import annotations

import logging
import math
from pathlib import Path

from trainhub.jobs import logs
from trainhub.runs.lifecycle import DB_ERRORS
from workers.logwriter import DbOutage
from workers.runner.report import read_events

log = logging.getLogger(__name__)
MAX_VALUES = 1_000  # metrics stored from one event; a job naming more at one step keeps the first ones


class EventReader:
    def __init__(self, job_id: int, run_dir: Path, outage: DbOutage, prefix: str = ""):
        self.job_id = job_id
        self.prefix = prefix  # a cross-site job's other sites: their metrics as "<pool>/name", no progress
        self.run_dir = run_dir
        self.outage = outage
        self.offset = 0

    def pump(self, rounds: int = 1) -> bool:
        """Store new metrics and progress, at most ``rounds`` reads of ``READ_MAX`` bytes (so the
        supervision loop is never held up by a huge file); True if there were events. The offset
        moves only once they are stored, so events read during a database outage are read again
        (metrics are idempotent per step)."""
        found = False
        for _ in range(rounds):
            try:
                events, offset = read_events(self.run_dir, self.offset)
                self._store(events)
            except DB_ERRORS as exc:
                self.outage.failed(exc)
                return found
            moved, self.offset = offset != self.offset, offset
            found = found or bool(events)
            if not moved:
                break
        return found

    def _store(self, events: list[dict]) -> None:
        progress = None
        metrics: list[tuple[int, dict[str, float]]] = []  # stored in one statement, not one per event
        for event in events:
            kind = event.get("type")
            try:
                if kind == "metrics" and isinstance(event.get("values"), dict):
                    values = {self.prefix + str(k): float(v) for k, v in event["values"].items()
                              if isinstance(v, (int, float)) and math.isfinite(v)}
                    if len(values) > MAX_VALUES:
                        log.warning("job %s: a metrics event with %d values; keeping the first %d",
                                    self.job_id, len(values), MAX_VALUES)
                        values = dict(list(values.items())[:MAX_VALUES])
                    if values:
                        metrics.append((int(event.get("step", 0)), values))
                elif kind in ("progress", "start") and "total_steps" in event and not self.prefix:
                    progress = (int(event.get("step", 0)), int(event["total_steps"]))
            except (TypeError, ValueError):  # a malformed event is skipped, never fatal
                log.warning("job %s: skipped malformed event %r", self.job_id, event)
        if metrics:
            logs.record_metric_rows(self.job_id, metrics)
        if progress:
            logs.record_progress(self.job_id, *progress)

