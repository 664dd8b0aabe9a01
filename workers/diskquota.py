"""A job's run directory has a cap on disk: ``TRAINHUB_RUN_DIR_MAX_BYTES`` (0 = none).

The worker measures the directory while the job runs and once more when it ends; past the cap
the job is stopped and fails with "run directory exceeded N GB". Measured as the blocks
allocated (``st_blocks``), so a sparse file counts what it holds, not what it claims; links are
not followed, and hard links count once per name (erring towards the cap). A job with a huge
tree makes the walk slow, so the next walk waits at least 20 times as long as the last took.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

CHECK_SECONDS = 5.0


def usage(path: Path, stop_at: int | None = None) -> int:
    """Bytes allocated under ``path``; counting stops once past ``stop_at``."""
    total, folders = 0, [str(path)]
    while folders:
        try:
            entries = os.scandir(folders.pop())
        except OSError:  # gone, or not a folder: nothing to count
            continue
        with entries:
            for entry in entries:
                try:
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
                except OSError:
                    continue
                if stop_at is not None and total > stop_at:
                    return total
    return total


def size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


class DiskQuota:
    """``exceeded()`` says why the job must stop (its run directory is over ``cap`` bytes), or None."""

    def __init__(self, run_dir: Path, cap: int):
        self.run_dir = run_dir
        self.cap = cap
        self.next_check = 0.0

    def exceeded(self, now: float | None = None) -> str | None:
        """Checks at most every ``CHECK_SECONDS`` (or 20 times the last walk); ``now=None`` checks now."""
        if not self.cap or (now is not None and now < self.next_check):
            return None
        started = time.monotonic()
        used = usage(self.run_dir, stop_at=self.cap)
        self.next_check = time.monotonic() + max(CHECK_SECONDS, 20 * (time.monotonic() - started))
        if used <= self.cap:
            return None
        return (f"run directory exceeded {size(self.cap)} (TRAINHUB_RUN_DIR_MAX_BYTES): it holds more than "
                f"{size(used)}; keep fewer checkpoints (checkpoint.keep_last) or write less, or ask an "
                f"administrator to raise the cap")
