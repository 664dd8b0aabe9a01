"""The backend interface; documented in ``workers.backends``."""
from __future__ import annotations

import queue
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

Output = list[tuple[str, list[tuple[int, str]]]]


def drain(items: queue.Queue) -> Output:
    """Everything queued so far, without waiting: what ``Handle.lines()`` returns."""
    out = []
    while True:
        try:
            out.append(items.get_nowait())
        except queue.Empty:
            return out


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
    #: the pool's ``sandbox`` (``workers.sandbox``: required | off); None: no pool decided, run as before
    sandbox: str | None = None
    network: bool = False  # the sandbox keeps the host's network (the pool allows it, or a gang's rendezvous)
    read_only: tuple[Path, ...] = ()  # shown read-only besides the project: the workspace, the spec paths' places


class Handle(Protocol):
    def poll(self) -> int | None: ...

    def cancel(self, grace: float) -> None: ...

    def lines(self) -> Output: ...

    def close(self, timeout: float) -> None: ...

    def describe(self) -> str: ...


class Backend(Protocol):
    def start(self, run: RunRequest) -> Handle: ...
