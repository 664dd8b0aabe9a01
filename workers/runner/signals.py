"""SIGTERM/SIGINT: ask the loop to checkpoint and stop, with a hard deadline.

The handler only sets a flag; the loop checks it at every optimizer step (all ranks agree
through one all-reduce), writes a checkpoint and exits with ``EXIT_INTERRUPTED``. If that
takes longer than ``TRAINHUB_GRACE_SECONDS`` seconds (default 15; the worker sets it, the same
grace it gives before SIGKILL) the process exits anyway, so a cancelled job never lingers.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

EXIT_INTERRUPTED = 143  # 128 + SIGTERM, what a shell reports for a terminated process

_requested = threading.Event()
_reason: list[str] = []


def install() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _handle)
        signal.signal(signal.SIGINT, _handle)
    if "TORCHELASTIC_RUN_ID" in os.environ:
        _die_with_launcher()


def _die_with_launcher() -> None:
    """torchrun starts each rank in a session of its own, so a signal to the job's process
    group reaches only torchrun; if torchrun is killed outright the ranks would live on.
    Ask Linux to send us SIGTERM when our parent dies (checkpoint, then exit)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the launcher died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def requested() -> bool:
    return _requested.is_set()


def reason() -> str:
    return _reason[0] if _reason else "stop requested"


def _handle(signum, frame) -> None:
    if _requested.is_set():
        return
    _reason.append(f"received {signal.Signals(signum).name}")
    _requested.set()
    print(f"{_reason[0]}: saving a checkpoint and stopping", file=sys.stderr, flush=True)
    timer = threading.Timer(grace_seconds(), _give_up)
    timer.daemon = True
    timer.start()


def grace_seconds() -> float:
    """``TRAINHUB_GRACE_SECONDS``; the old ``TRAINHUB_STOP_GRACE_S`` still works, with a warning."""
    name = "TRAINHUB_GRACE_SECONDS"
    if name not in os.environ and "TRAINHUB_STOP_GRACE_S" in os.environ:
        name = "TRAINHUB_STOP_GRACE_S"
        print(f"{name} is deprecated: set TRAINHUB_GRACE_SECONDS instead", file=sys.stderr, flush=True)
    try:
        return float(os.environ.get(name) or 15)
    except ValueError:  # never let a typo stop the checkpoint: say so and use the default
        print(f"{name}={os.environ[name]!r} is not a number of seconds; using 15", file=sys.stderr, flush=True)
        return 15.0


def _give_up() -> None:
    print("could not stop cleanly in time; exiting without a final checkpoint", file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED)
