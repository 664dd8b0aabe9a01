"""Where a job's processes run. One small interface, so that the executor (one job, node 0
of a gang) and a gang's other nodes start, watch and stop processes the same way wherever
they run: today a process group on this worker (``local``); next, an allocation on machines
the worker does not own (Slurm), and later another site.

The interface, and what a backend promises:

``Backend.start(run: RunRequest) -> Handle``
    Start ``run.argv`` with exactly ``run.env`` (already built by ``workers.process.child_env``,
    secrets removed; a backend adds nothing of the worker's own environment) in ``run.cwd``.
    Raises ``OSError`` (or a subclass) when it cannot start; nothing is left running then.
    ``run.sandbox`` is the pool's setting (``workers.sandbox``): ``required`` confines the process
    tree (``local``: bubblewrap; ``run.network`` and ``run.read_only`` say what it may reach) and
    fails to start where it cannot; ``off`` says so in the job's output; None (no pool) runs it as is.

``Handle.poll() -> int | None``
    Never blocks. The exit code once every process of the run has ended (negative: killed
    by that signal), else None. A cancel's grace period is enforced here: once it has passed,
    ``poll`` kills what is left.
``Handle.cancel(grace: float) -> None``
    Never blocks. Asks the processes to stop (SIGTERM, so the runner checkpoints) and kills
    them ``grace`` seconds later. Calling it again does not extend the grace.
``Handle.lines(max_lines=None) -> list[(stream, [(rank, text), ...])]``
    Never blocks. The output that arrived since the last call, in order per stream: "o" for
    stdout, "e" for stderr; ``rank`` from torchrun's ``[rankN]:`` prefix (see ``workers.lines``).
    With ``max_lines``, about that many (whole batches); the rest waits for the next call.
    What waits is bounded (``base.OutputQueue``): a run whose output is not taken is slowed
    down (its pipe fills), never cut — the caller decides how much it can store.
``Handle.close(timeout: float) -> None``
    After ``poll`` returned a code: kills anything of the run still alive, and waits up to
    ``timeout`` seconds for the last output, which the next ``lines()`` returns.
``Handle.describe() -> str``
    Where the run is, for the job's log ("process group 1234 on host-a", "slurm job 77").

Backends are looked up by name in ``BACKENDS``; no ``if backend == ...`` elsewhere.
"""
from __future__ import annotations

from workers.backends.base import Backend, Handle, Output, RunRequest
from workers.backends.local import LocalBackend
from workers.backends.slurm import SlurmBackend

__all__ = ["BACKENDS", "Backend", "Handle", "Output", "RunRequest", "get"]

BACKENDS: dict[str, type[Backend]] = {"local": LocalBackend, "slurm": SlurmBackend}


def get(name: str, **options) -> Backend:
    """The backend ``name``; ``options`` are its own (e.g. ``slurm``'s ``SlurmOptions``)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}: choose one of {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name](**options)
