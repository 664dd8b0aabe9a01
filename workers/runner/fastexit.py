"""Leave a process the moment its work is done, without the interpreter's teardown.

    exit_now(code)                                   # the runner's last call
    python workers/runner/fastexit.py ARGS...        # torchrun ARGS..., leaving the same way

After training, a normal exit spends seconds on nothing a job needs: Python's finalization walks
and frees every object of torch, NumPy, scikit-learn and pydantic (full garbage collections over
the whole module graph, then libtorch's operator registry unwinding), all of it CPU. Measured on
the 2-core development machine (docs/BENCHMARKS.md, "Where a job's last seconds go"): 1.1 s
for a one-process runner, 1.5–2.1 s per rank of a 2-rank DDP job and 0.8–1.5 s for torchrun after
its ranks were gone — seconds that lie between the runner's ``end`` event and the job's final status.

``exit_now`` keeps what a normal exit guarantees — non-daemon threads joined, ``atexit`` handlers
run (logging flushed, multiprocessing's children such as DataLoader workers ended), stdout and
stderr flushed — and then ends the process with ``os._exit``. Files written before it (the
checkpoint, ``events.jsonl``, ``model.pt``) were closed by the code that wrote them.

Run by path this module is torchrun (``torch.distributed.run``) ending the same way: the launcher
waits for its ranks, stops its log tails and leaves its rendezvous as always; only its own
interpreter teardown is skipped. Run by path and stdlib-only on purpose: importing the
``workers.runner`` package would load pydantic into the launcher for nothing.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading


def exit_now(code: int) -> None:
    """End this process with ``code`` as a normal exit would, minus the interpreter's finalization."""
    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter does first: wait for non-daemon threads
    if shutdown is not None and threading.current_thread() is threading.main_thread():
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # closed, or no stream at all
            pass
    os._exit(code)


def torchrun() -> None:
    """``torchrun`` with the argv of this process; leaves through ``exit_now``."""
    sys.path[0] = os.getcwd()  # as ``python -m torch.distributed.run`` has it, not this file's directory
    from torch.distributed.run import main

    try:
        main()
    except Exception:  # a rank failed (ChildFailedError), or the launcher itself: reported as Python would
        sys.excepthook(*sys.exc_info())
        exit_now(1)
    exit_now(0)


if __name__ == "__main__":
    torchrun()
