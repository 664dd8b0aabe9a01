"""The ``local`` backend: a guarded process group on this worker (``workers.process``), its
stdout and stderr read by two threads into lines; the job's processes in a bubblewrap sandbox
(``workers.sandbox``) unless the pool's ``sandbox`` is off."""
from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

from workers import process, sandbox
from workers.backends.base import Output, OutputQueue, RunRequest
from workers.runner.launch import REPO_ROOT

UNSANDBOXED = "trainhub: running unsandboxed (pool setting)"


class LocalHandle:
    def __init__(self, run: RunRequest):
        argv, sandboxed = run.argv, run.sandbox == sandbox.REQUIRED
        if sandboxed:
            if not sandbox.available():
                raise FileNotFoundError(f"this worker has no bubblewrap (bwrap) for the pool's sandbox: "
                                        f"{sandbox.INSTALL_HINT}")
            argv = sandbox.argv(plan_for(run)) + list(run.argv)
        self.process = process.GuardedProcess(argv, env=run.env, cwd=run.cwd, sandboxed=sandboxed)
        self._out = OutputQueue()
        if run.sandbox == sandbox.OFF:
            self._out.put(("e", [(run.first_rank, UNSANDBOXED)]))
        self._readers: list[threading.Thread] = process.pump_output(self.process.popen, self._out, run.first_rank)

    def poll(self) -> int | None:
        return self.process.poll()

    def cancel(self, grace: float) -> None:
        self.process.terminate(grace)

    def lines(self, max_lines: int | None = None) -> Output:
        return self._out.take(max_lines)

    def close(self, timeout: float) -> None:
        self.process.kill()
        self._out.release()  # the readers hand over what is left in the pipes, however much
        deadline = time.monotonic() + timeout
        for reader in self._readers:  # a grandchild that kept a pipe open was killed above
            reader.join(timeout=max(0.0, deadline - time.monotonic()))

    def describe(self) -> str:
        return f"process group {self.process.pgid} on {socket.gethostname()}"


def plan_for(run: RunRequest) -> sandbox.Plan:
    """What the sandbox of ``run`` shows: the runs root and var/ hidden, the run dir writable."""
    run_dir = Path(run.run_dir).resolve()
    extensions = run.env.get("TORCH_EXTENSIONS_DIR")
    writable: tuple[Path, ...] = ()
    if extensions:  # DeepSpeed's JIT-built ops: a cache shared by jobs, built once (see docs/SECURITY.md)
        Path(extensions).mkdir(parents=True, exist_ok=True)
        writable = (Path(extensions),)
    return sandbox.Plan(
        run_dir=run_dir, cwd=Path(run.cwd).resolve(), project=REPO_ROOT, env=run.env,
        read_only=tuple(Path(p) for p in run.read_only), read_write=writable,
        hidden=(run_dir.parent, _var_dir(), REPO_ROOT / "var", REPO_ROOT / "runs"), gpus=sandbox.gpu_indexes(run.env),
        network=run.network, device_dir=Path(os.environ.get(sandbox.DEVICE_DIR_ENV, "/dev")),
        pythons=sandbox.python_roots())


def _var_dir() -> Path:
    """The worker's var/ (database, secret key): from the settings when Django is set up."""
    try:
        from django.conf import settings

        return Path(settings.VAR_DIR).resolve()
    except Exception:  # no Django here (a bare backend test): the environment's or the project's
        return Path(os.environ.get("TRAINHUB_VAR_DIR", REPO_ROOT / "var")).resolve()


class LocalBackend:
    def start(self, run: RunRequest) -> LocalHandle:
        return LocalHandle(run)
