"""What the fault tests share: a team workspace with small scripts, log checks, and a TCP
proxy that can cut a worker off from its database."""
import socket
import threading
from pathlib import Path

from tests.conftest import database_url
from trainhub.jobs.logs import iter_all
from trainhub.pools.models import Workspace

#: prints ``tick 0`` … ``tick N-1``, one every ``DELAY`` seconds (argv: N DELAY)
TICKER = """import sys, time
n, delay = int(sys.argv[1]), float(sys.argv[2])
for i in range(n):
    print(f"tick {i}", flush=True)
    time.sleep(delay)
"""
#: says hello, then sleeps without a word
SILENT = """import time
print("hello, then silence", flush=True)
time.sleep(600)
"""
#: writes ``MB`` megabytes into its run directory (argv: MB)
FILLER = """import os, sys
with open(os.path.join(os.environ["TRAINHUB_RUN_DIR"], "blob.bin"), "wb") as fh:
    for _ in range(int(sys.argv[1])):
        fh.write(b"x" * (1 << 20))
        fh.flush()
"""


def team_workspace(tmp_path: Path) -> Workspace:
    folder = tmp_path / "team"
    folder.mkdir(exist_ok=True)
    for name, text in (("ticker.py", TICKER), ("silent.py", SILENT), ("filler.py", FILLER)):
        (folder / name).write_text(text)
    return Workspace.objects.get_or_create(name="team", defaults={"path": str(folder)})[0]


def script(entry: str, *args: str, **spec) -> dict:
    return {"mode": "script", "script": {"workspace": "team", "entry": entry, "args": list(args)}, **spec}


def assert_ticks_complete(job_id: int, n: int) -> None:
    """Every ``tick i`` exactly once, and the stored seqs have no gap."""
    lines = [line for chunk in iter_all(job_id) for line in chunk]
    seqs = [line.seq for line in lines]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "the log has a gap"
    ticks = [line.text for line in lines if line.text.startswith("tick ")]
    assert ticks == [f"tick {i}" for i in range(n)], f"{len(ticks)} ticks, expected {n}"


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``upstream``; ``down()`` cuts it like a database outage.

    Down: every open connection is closed on both sides, and a new one is accepted and closed
    at once (the client reads "server closed the connection unexpectedly"); ``up()`` forwards
    new connections again. Threads only, one pair per connection.
    """

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.5)  # so that accept() sees close()
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.open: set[socket.socket] = set()
        self.is_down = False
        self.cut = 0  # connections closed by down()
        self.turned_away = 0  # connections closed at once while down
        self.forwarded = 0  # connections passed through to the upstream
        self.closed = False
        threading.Thread(target=self._accept, daemon=True, name="tcp-proxy").start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # the listener was closed
            with self.lock:
                down = self.is_down
                if down:
                    self.turned_away += 1
            if down:
                self._close(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                self._close(client)
                continue
            with self.lock:
                if self.is_down:  # went down while connecting
                    self.turned_away += 1
                    self._close(client)
                    self._close(server)
                    continue
                self.open |= {client, server}
                self.forwarded += 1
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        with self.lock:  # one side ended: end the pair
            self.open -= {src, dst}
        self._close(src)
        self._close(dst)

    @staticmethod
    def _close(sock: socket.socket) -> None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()

    def down(self) -> int:
        """Cut every open connection and turn new ones away; returns how many were cut."""
        with self.lock:
            self.is_down = True
            victims, self.open = self.open, set()
            self.cut += len(victims) // 2
        for sock in victims:
            self._close(sock)
        return len(victims) // 2

    def up(self) -> None:
        with self.lock:
            self.is_down = False

    def close(self) -> None:
        self.closed = True
        self.down()
        self._close(self.listener)


def through(proxy: TcpProxy) -> str:
    """The test database's URL with the proxy's port (the ``proxy`` fixture: PostgreSQL only)."""
    head, name = database_url().rsplit("/", 1)
    return f"{head.rsplit(':', 1)[0]}:{proxy.port}/{name}"
