"""Progress and metric events: JSON lines in ``<run_dir>/events.jsonl``.

This file is the runner's only structured channel to the outside world (the executor
tails it). One event per line, always with ``type`` and ``time`` (unix seconds):

- ``{"type": "start", "world_size": 2, "total_steps": 300, "strategy": "ddp"}``
- ``{"type": "progress", "step": 10, "total_steps": 300, "epoch": 0}``
- ``{"type": "metrics", "step": 10, "values": {"loss": 1.2, "lr": 0.001}}``
- ``{"type": "checkpoint", "step": 200, "path": "checkpoints/step-200"}``
- ``{"type": "artifact", "name": "model", "path": "model.pt"}``
- ``{"type": "end", "status": "succeeded" | "failed" | "interrupted", "reason": "..."}``

Only the main process (global rank 0) writes events.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from workers.runner import fence

EVENTS_FILE = "events.jsonl"
#: bytes of the events file read at once: the reader (the worker) holds no more of it in memory, and a
#: line longer than this is dropped (read on as fragments that are not JSON), whatever a job writes there
READ_MAX = 4 * 1024 * 1024


class Reporter:
    """Appends events for one run; a no-op on ranks other than the main one."""

    def __init__(self, run_dir: str | Path, enabled: bool = True):
        self.path = Path(run_dir) / EVENTS_FILE
        self.enabled = enabled
        self._fh = open(self.path, "a", encoding="utf-8") if enabled else None

    def emit(self, type_: str, **fields: Any) -> None:
        """Append one event; raises :class:`fence.Superseded` (once, then silent) if a newer attempt owns the
        run directory."""
        self._write([{"type": type_, **fields}])

    def _write(self, events: list[dict[str, Any]]) -> None:
        """Append ``events`` (each given its ``time``) with one fence check and one write: a log
        window's progress and metrics cost one read of the fence file and one flush, not two."""
        if not self._fh:
            return
        try:
            fence.check(self.path.parent)
        except fence.Superseded:
            self.close()
            raise
        now = round(time.time(), 3)
        self._fh.write("".join(json.dumps({"type": e["type"], "time": now, **e}, default=_jsonable) + "\n"
                               for e in events))
        self._fh.flush()

    def metrics(self, step: int, **values: float) -> None:
        clean = _clean(values)
        if clean:
            self.emit("metrics", step=step, values=clean)

    def window(self, step: int, total_steps: int, epoch: int, values: dict[str, float]) -> None:
        """A log window's ``progress`` and ``metrics`` events, written together."""
        events = [{"type": "progress", "step": step, "total_steps": total_steps, "epoch": epoch}]
        clean = _clean(values)
        if clean:
            events.append({"type": "metrics", "step": step, "values": clean})
        self._write(events)

    def progress(self, step: int, total_steps: int, epoch: int) -> None:
        self.emit("progress", step=step, total_steps=total_steps, epoch=epoch)

    def close(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None


def _clean(values: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def read_events(run_dir: str | Path, offset: int = 0, limit: int = READ_MAX) -> tuple[list[dict[str, Any]], int]:
    """Read complete event lines from ``offset``, at most ``limit`` bytes; returns the events and the
    new offset (call again for more). A line longer than ``limit`` is skipped."""
    path = Path(run_dir) / EVENTS_FILE
    if not path.exists():
        return [], offset
    with open(path, "rb") as fh:
        fh.seek(offset)
        chunk = fh.read(limit)
    end = chunk.rfind(b"\n") + 1
    if end == 0 and len(chunk) == limit:  # no line ends within the limit: drop this much of it
        return [], offset + limit
    events = []
    for raw in chunk[:end].splitlines():
        try:
            events.append(json.loads(raw))
        except ValueError:
            continue
    return events, offset + end


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0
