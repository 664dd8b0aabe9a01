"""Starts a team's script as one torchrun rank, tied to the launcher's life.

    torchrun ... workers/runner/script_entry.py /ws/train.py ARGS...
    torchrun ... workers/runner/script_entry.py -m pkg.train ARGS...

torchrun puts each rank in a session of its own, so killing the job's process group never
reaches the ranks; if torchrun itself is killed they would live on. This asks Linux to
SIGTERM the rank when its parent dies, then runs the script exactly as ``python FILE`` /
``python -m MODULE`` would (``__main__``, ``sys.argv``, ``sys.path[0]``). Run by path and
stdlib-only on purpose: it must not import anything that could shadow the team's modules.
"""
import ctypes
import os
import runpy
import signal
import sys


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    args = sys.argv[1:]
    if not args:
        sys.exit("usage: script_entry.py FILE [ARGS...] | -m MODULE [ARGS...]")
    _die_with_parent()
    if args[0] == "-m" and len(args) > 1:
        sys.argv = [args[1], *args[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = [args[0], *args[1:]]
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
