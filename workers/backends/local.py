"""The ``local`` backend: a guarded process group on this worker (``workers.process``), its
stdout and stderr read by two threads into lines."""
from __future__ import annotations

import queue
import socket
import threading
import time

from workers import process
from workers.backends.base import Output, RunRequest, drain


class LocalHandle:
    def __init__(self, run: RunRequest):
        self.process = process.GuardedProcess(run.argv, env=run.env, cwd=run.cwd)
        self._out: queue.Queue = queue.Queue()
        self._readers: list[threading.Thread] = process.pump_output(self.process.popen, self._out)

    def poll(self) -> int | None:
        return self.process.poll()

    def cancel(self, grace: float) -> None:
        self.process.terminate(grace)

    def lines(self) -> Output:
        return drain(self._out)

    def close(self, timeout: float) -> None:
        self.process.kill()
        deadline = time.monotonic() + timeout
        for reader in self._readers:  # a grandchild that kept a pipe open was killed above
            reader.join(timeout=max(0.0, deadline - time.monotonic()))

    def describe(self) -> str:
        return f"process group {self.process.pgid} on {socket.gethostname()}"


class LocalBackend:
    def start(self, run: RunRequest) -> LocalHandle:
        return LocalHandle(run)
