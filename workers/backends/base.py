"""The backend interface; documented in ``workers.backends``."""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

Output = list[tuple[str, list[tuple[int, str]]]]


#: lines waiting between a run's readers and the log; a reader that finds this many waits
OUTPUT_LINES = 100_000


class OutputQueue:
    """A run's output on its way to the log, at most ``limit`` lines waiting.

    A reader thread that finds it full waits (``put`` blocks), so it stops reading the pipe, the
    pipe fills and the job's own ``print`` blocks: a job that prints faster than its log is
    stored slows down instead of losing lines. ``release()`` lifts the limit once the run has
    ended, so the readers can hand over the last lines and finish."""

    def __init__(self, limit: int | None = None):
        self.limit = OUTPUT_LINES if limit is None else limit
        self._items: deque = deque()  # (item, its number of lines)
        self._lines = 0
        self._released = False
        self._cond = threading.Condition()

    def put(self, item, lines: int | None = None) -> None:
        """Queue ``item``, a ``(stream, [(rank, text), ...])`` batch (or anything else, with
        ``lines`` saying how many lines it holds); waits while the queue is full."""
        with self._cond:
            while self._lines >= self.limit and not self._released:
                self._cond.wait(1.0)
            n = len(item[1]) if lines is None else lines
            self._items.append((item, n))
            self._lines += n

    def take(self, max_lines: int | None = None) -> list:
        """What is waiting, in order, without blocking; whole items, stopping once
        ``max_lines`` lines are taken (the last item may pass it)."""
        out: list = []
        taken = 0
        with self._cond:
            while self._items and (max_lines is None or taken < max_lines):
                item, n = self._items.popleft()
                out.append(item)
                taken += n
            self._lines -= taken
            self._cond.notify_all()
        return out

    def release(self) -> None:
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def __len__(self) -> int:
        """Lines waiting."""
        return self._lines


@dataclass(frozen=True)
class RunRequest:
    """One process tree to start: a job's attempt, or one node of a multi-node attempt."""

    argv: list[str]
    env: dict[str, str] = field(repr=False)
    cwd: str | Path
    run_dir: Path
    job_id: int
    attempt: int
    node_rank: int = 0
    #: the rank of a line without torchrun's ``[rankN]:`` prefix: this node's first rank
    first_rank: int = 0
    #: the pool's ``sandbox`` (``workers.sandbox``: required | off); None: no pool decided, run as before
    sandbox: str | None = None
    network: bool = False  # the sandbox keeps the host's network (the pool allows it, or a gang's rendezvous)
    read_only: tuple[Path, ...] = ()  # shown read-only besides the project: the workspace, the spec paths' places


class Handle(Protocol):
    def poll(self) -> int | None: ...

    def cancel(self, grace: float) -> None: ...

    def lines(self, max_lines: int | None = None) -> Output: ...

    def close(self, timeout: float) -> None: ...

    def describe(self) -> str: ...


class Backend(Protocol):
    def start(self, run: RunRequest) -> Handle: ...
