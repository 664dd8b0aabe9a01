"""A job's processes on this machine: the one place that builds a job's environment, starts
its command under ``workers.guard``, signals its process group and kills it with grace.

Every job process (a single job, every node of a gang) starts here, so the list of the
dashboard's secrets kept out of training code is written once: ``SECRETS``. That deny-list is
for pools whose sandbox is off; a sandboxed job gets only ``workers.sandbox.allowed_env`` of this
environment (an allow-list: no *_PASSWORD, AWS_*, … of the worker's).
"""
from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from pathlib import Path
from subprocess import PIPE, Popen
from typing import TYPE_CHECKING

from workers.runner import launch
from workers.lines import PARTIAL_SECONDS, LineSplitter
from workers.runner.config import JobSpec

if TYPE_CHECKING:
    from workers.backends.base import OutputQueue

#: what the worker holds and training code must never see
SECRETS = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "TRAINHUB_SECRET_KEY", "REDIS_URL")


def child_env(spec: JobSpec, run_dir: Path, workspace_dir: Path | None, extra: dict[str, str]) -> dict[str, str]:
    """The launched command's environment: ``launch.env`` without ``SECRETS``, plus ``extra``
    (from the scheduler, e.g. CUDA_VISIBLE_DEVICES of the GPU lease)."""
    env = launch.env(spec, run_dir, workspace_dir=workspace_dir)
    for name in SECRETS:
        env.pop(name, None)
    env.update(extra)
    return env


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):  # already gone
        pass


class GuardedProcess:
    """``argv`` in a new session under ``workers.guard``: the process group dies with this worker.

    ``terminate(grace)`` sends SIGTERM to the whole group and returns at once; ``poll`` sends
    SIGKILL once the grace period has passed, so the caller keeps handling output meanwhile.
    """

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: str | Path, sandboxed: bool = False):
        flags = ["--sandboxed"] if sandboxed else []  # bwrap reports a signal as 128 + N
        guarded = [sys.executable, "-m", "workers.guard", str(os.getpid()), *flags, "--", *argv]
        self.popen = Popen(guarded, stdout=PIPE, stderr=PIPE, cwd=cwd, env=env, start_new_session=True)
        self.pgid = self.popen.pid  # a session leader's pid is its group's id
        self.kill_at: float | None = None

    def poll(self) -> int | None:
        code = self.popen.poll()
        if code is None and self.kill_at is not None and time.monotonic() >= self.kill_at:
            signal_group(self.pgid, signal.SIGKILL)  # also reaps grandchildren that ignored SIGTERM
            code = self.popen.wait()
        return code

    def terminate(self, grace: float) -> None:
        signal_group(self.pgid, signal.SIGTERM)
        if self.kill_at is None:
            self.kill_at = time.monotonic() + grace

    def kill(self) -> int:
        """SIGKILL what is left of the group (no rank or data-loader worker outlives the job);
        the exit code."""
        signal_group(self.pgid, signal.SIGKILL)
        return self.popen.wait()


def pump(pipe, stream: str, out: OutputQueue, rank: int = 0) -> None:
    """Read one pipe in chunks; put ``(stream, [(rank, text), ...])`` on ``out`` (``rank``: that of
    a line without torchrun's ``[rankN]:`` prefix)."""
    fd = pipe.fileno()
    splitter = LineSplitter(rank)
    while True:
        ready, _, _ = select.select([fd], [], [], PARTIAL_SECONDS / 2)
        lines = []
        if ready:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            lines = splitter.feed(chunk)
        lines += splitter.partial(time.monotonic())
        if lines:
            out.put((stream, lines))
    tail = splitter.close()
    if tail:
        out.put((stream, tail))
    pipe.close()


def pump_output(popen: Popen, out: OutputQueue, rank: int = 0) -> list[threading.Thread]:
    """A reader thread per pipe of ``popen`` (stdout as "o", stderr as "e"), putting lines on ``out``."""
    readers = [threading.Thread(target=pump, args=(pipe, stream, out, rank), daemon=True)
               for pipe, stream in ((popen.stdout, "o"), (popen.stderr, "e"))]
    for reader in readers:
        reader.start()
    return readers
