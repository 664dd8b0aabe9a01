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
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from workers.runner import fence

EVENTS_FILE = "events.jsonl"
#: bytes of the events file read at once: the reader (the worker) holds no more of it in memory, and a
#: line longer than this is dropped (read on as fragments that are not JSON), whatever a job writes there
READ_MAX = 4 * 1024 * 1024


class Reporter:
    """Appends events for one run; a no-op on ranks other than the main one.

    A log window that comes less than ``HOLD_SECONDS`` after the last write is held and goes out with the
    next write: windows of a run with millisecond steps come hundreds of times a second, and each write (a
    fence read, a system call) cost the training loop more than the window's own arithmetic (issue #12).
    The window's printed line (``window(line=...)``) is held with it and printed at the same flush.
    Every other event goes out at once and takes the held windows with it; so do ``flush()`` and ``close()``,
    which the loop calls before anything slow (an evaluation, a checkpoint). The worker reads the file every
    50 ms, so at steady speed the hold does not show on the job's page; a process killed outright loses the
    windows it held (at most ``HOLD_SECONDS`` of them, at steady speed)."""

    #: windows closer than this to the last write wait for the next one
    HOLD_SECONDS = 0.05

    def __init__(self, run_dir: str | Path, enabled: bool = True, out: TextIO | None = None):
        self.path = Path(run_dir) / EVENTS_FILE
        self.enabled = enabled
        self.out = out  # where the windows' printed lines go (the job's log); None: sys.stdout at the time
        self._fh = open(self.path, "a", encoding="utf-8") if enabled else None
        self._held: list[str] = []
        self._held_lines: list[str] = []  # the held windows' printed lines, printed with them
        self._written = 0.0  # time.monotonic() of the last write

    def emit(self, type_: str, **fields: Any) -> None:
        """Append one event (and any held windows); raises :class:`fence.Superseded` (once, then silent) if a
        newer attempt owns the run directory."""
        if self._fh:
            self._held.append(_line({"type": type_, "time": round(time.time(), 3), **fields}))
            self.flush()

    def flush(self) -> None:
        """Write what is held, with one fence check and one write."""
        if not (self._fh and self._held):
            return
        try:
            fence.check(self.path.parent)
        except fence.Superseded:
            self._held, self._held_lines = [], []  # a superseded run writes nothing more, held windows neither
            self.close()
            raise
        self._fh.write("".join(self._held))
        self._fh.flush()
        if self._held_lines:  # one write for all of them (an unbuffered print is two: the text, then "\n")
            out = self.out or sys.stdout
            out.write("".join(self._held_lines))
            out.flush()
        self._held, self._held_lines, self._written = [], [], time.monotonic()

    def metrics(self, step: int, **values: float) -> None:
        clean = _clean(values)
        if clean:
            self.emit("metrics", step=step, values=clean)

    def window(self, step: int, total_steps: int, epoch: int, values: dict[str, float], line: str = "") -> None:
        """A log window's ``progress`` and ``metrics`` events, written together (now, or held: see the class),
        and ``line``, the window's line for the job's log, printed with them: a job logging every few ms
        wakes the worker reading its output once per write, so a held window's line waits with it."""
        if not self._fh:
            return
        if line:
            self._held_lines.append(line + "\n")
        now = round(time.time(), 3)
        self._held.append(_line({"type": "progress", "time": now, "step": step, "total_steps": total_steps,
                                 "epoch": epoch}))
        clean = _clean(values)
        if clean:
            self._held.append(_line({"type": "metrics", "time": now, "step": step, "values": clean}))
        if time.monotonic() - self._written >= self.HOLD_SECONDS:
            self.flush()

    def progress(self, step: int, total_steps: int, epoch: int) -> None:
        self.emit("progress", step=step, total_steps=total_steps, epoch=epoch)

    def close(self) -> None:
        if self._fh:
            if self._held:
                try:
                    self.flush()
                except fence.Superseded:  # flush closed the file: a superseded run writes nothing more
                    return
            self._fh.close()
            self._fh = None


def _line(event: dict[str, Any]) -> str:
    return _ENCODER.encode(event) + "\n"


def _clean(values: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


#: one encoder for every event (``json.dumps(default=...)`` builds a new one per call)
_ENCODER = json.JSONEncoder(default=_jsonable)


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
