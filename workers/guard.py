"""Stands between a worker and a job's process group: if the worker dies, the job dies.

``python -m workers.guard WORKER_PID [--sandboxed] -- CMD...`` runs CMD in the guard's process group
(the executor starts the guard as a session leader). When the worker process disappears —
SIGKILL, OOM, a lost host — the guard is re-parented, notices, and SIGTERMs then SIGKILLs the
whole group, so no rank, launcher or data-loader worker outlives its worker. The guard's
exit status mirrors CMD's, signals included; with ``--sandboxed`` CMD is bubblewrap, which reports
a job killed by signal N as 128 + N, and the guard dies of N as the job did.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

# The worker puts its TRAINHUB_GRACE_SECONDS (trainhub/settings.py) into the job environment it starts us with.
GRACE_SECONDS = float(os.environ.get("TRAINHUB_GRACE_SECONDS", "15"))


def main(argv: list[str]) -> int:
    sandboxed = len(argv) > 1 and argv[1] == "--sandboxed"
    if sandboxed:
        argv = [argv[0], *argv[2:]]
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python -m workers.guard WORKER_PID [--sandboxed] -- CMD...\n")
        return 2
    worker = int(argv[0])
    # SIGTERM to the group is for the job's processes; the guard waits for them to exit.
    # A handler (not SIG_IGN) so that the child starts with the default disposition.
    signal.signal(signal.SIGTERM, lambda *_: None)
    child = subprocess.Popen(argv[2:])
    exited = _exit_waiter(child)
    while child.poll() is None:
        if os.getppid() != worker:
            os.killpg(0, signal.SIGTERM)
            deadline = time.monotonic() + GRACE_SECONDS
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            os.killpg(0, signal.SIGKILL)
        exited(0.2)  # returns at the child's exit, else after 0.2 s to look at the worker again
    code = child.returncode
    if sandboxed and 128 < code < 128 + signal.NSIG:
        code = 128 - code
    if code < 0:  # die of the same signal, so the executor reports it truthfully
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # these two have no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _exit_waiter(child: subprocess.Popen):
    """``wait(seconds)``: sleep until ``child`` exits or ``seconds`` pass. A pidfd wakes the guard only
    then; ``Popen.wait(timeout)`` polls every few ms (about 20 wake-ups a second for the whole job)."""
    try:
        fd = os.pidfd_open(child.pid)
    except (AttributeError, OSError):  # not Linux ≥ 5.3: poll
        def poll(seconds: float) -> None:
            try:
                child.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                pass
        return poll
    return lambda seconds: select.select([fd], [], [], seconds)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
