"""Fencing for a run that wakes up too late.

A worker frozen past its lease (a paused VM, a swapped-out host) may wake after another worker has taken its
job over and run it again in the same run directory. The database refuses the late worker's writes (every
write is fenced by the lease token), but the late run's own processes write files. So the executor writes the
attempt that owns the run directory into ``<run_dir>/.attempt`` before it starts them and gives them
``TRAINHUB_ATTEMPT``; before each write the runner checks that no newer attempt has taken the directory, and
stops without writing if one has. The bare runner (no ``TRAINHUB_ATTEMPT``) is never fenced.
"""
from __future__ import annotations

import os
from pathlib import Path

FENCE_FILE = ".attempt"
EXIT_SUPERSEDED = 3


class Superseded(RuntimeError):
    """A newer attempt of this job owns the run directory: this run must write nothing more."""


def attempt() -> int | None:
    """This process's attempt (``TRAINHUB_ATTEMPT``); None for the bare runner."""
    mine = os.environ.get("TRAINHUB_ATTEMPT", "")
    return int(mine) if mine.isdigit() else None


def check(run_dir: str | Path) -> None:
    """Raise :class:`Superseded` if a newer attempt than this process's owns ``run_dir``."""
    mine = attempt()
    if mine is None:
        return
    try:  # os-level: it runs before every events write, and a Python file object costs ~4x the syscalls
        fd = os.open(os.path.join(run_dir, FENCE_FILE), os.O_RDONLY)
        try:
            owner = int(os.read(fd, 64))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return
    if owner > mine:
        raise Superseded(f"attempt {mine} of this job was superseded by attempt {owner} (its worker lost the "
                         "lease and another ran the job again); stopping without writing anything more")


def claim(run_dir: str | Path, attempt: int) -> None:
    """Mark ``run_dir`` as owned by ``attempt`` (atomically: a reader sees the old or the new number)."""
    path = Path(run_dir) / FENCE_FILE
    tmp = path.with_name(f"{FENCE_FILE}.{os.getpid()}.tmp")
    tmp.write_text(f"{attempt}\n", encoding="ascii")
    os.replace(tmp, path)
