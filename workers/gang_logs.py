"""The output of a multi-node job's other nodes, forwarded to node 0 through Redis.

Node 0's executor is the one writer of a job's log: it numbers lines gap-free (``seq``). Every
other node sends its lines to a Redis Stream of the job's attempt,
``trainhub:gang:<job>:<lease token>``, and node 0 reads that stream and numbers those lines
among its own, so every rank of every node is in the job's log, live. Each entry carries its
node and the index of its first line: a resend after a lost reply is recognised and dropped,
never stored twice. A cross-site job's place taken over by another worker (its own was lost)
sends as a new *holder* of the node: the leader starts that node's count again and from then
on drops what an older holder sends. A node ends with an ``eof`` entry; node 0 waits for them (briefly) before
the job's log is closed. The node's ``logs/node<R>.out`` stays the complete copy if Redis
itself is lost.
"""
from __future__ import annotations

import json
import logging
import time

import redis

from trainhub.jobs import logs

log = logging.getLogger(__name__)
KEY_TTL = 24 * 3600
ENTRY_LINES = 200
#: lines a node keeps while Redis is unreachable; beyond it they are counted and a marker says so
PENDING_MAX = 100_000


def stream_key(job_id: int, lease_token: int) -> str:
    return f"trainhub:gang:{job_id}:{lease_token}"


class Sender:
    """One non-zero node's side: ``add`` lines as they are read, ``flush`` often, ``close`` at the end."""

    def __init__(self, job_id: int, lease_token: int, node_rank: int, first_rank: int, holder: int = 0):
        self.key = stream_key(job_id, lease_token)
        self.node = node_rank
        self.holder = holder  # which worker's run of the node (a place taken over: a higher number)
        self.first_rank = first_rank  # unprefixed lines (torchrun's own) belong to this node's first rank
        self.buffer: list[list] = []  # [rank, stream, text], not yet sent
        self.sent = 0  # index of the next line to send
        self.dropped = 0
        self.failing = False
        self.backoff = 0.0
        self.retry_at = 0.0

    def add(self, stream: str, items: list[tuple[int, str]]) -> None:
        room = PENDING_MAX - len(self.buffer)
        if room < len(items):
            self.dropped += len(items) - max(room, 0)
            items = items[:max(room, 0)]
        # a line without torchrun's [rankN] prefix already carries the node's first rank (the backend's
        # RunRequest.first_rank); a [rank0] line keeps its 0 even on another node (c10d's rendezvous
        # does not give node 0 the group's first ranks)
        self.buffer.extend([[rank, stream, text] for rank, text in items])

    def flush(self) -> bool:
        """Send what is buffered; False while Redis is unreachable (the lines stay buffered and
        are sent again after a backoff of 0.2 s doubling to 5 s, so a dead Redis costs little)."""
        if time.monotonic() < self.retry_at:
            return False
        try:
            client = logs.redis_client()
            while True:
                while self.buffer:
                    chunk = self.buffer[:ENTRY_LINES]
                    client.xadd(self.key, {"node": self.node, "holder": self.holder, "first": self.sent,
                                           "lines": json.dumps(chunk)})
                    self.sent += len(chunk)
                    del self.buffer[:len(chunk)]
                if not self.dropped:
                    break
                self.buffer.append([self.first_rank, "s", f"[node {self.node}: {self.dropped} lines not forwarded "
                                                          f"while Redis was unreachable; see logs/node{self.node}.out]"])
                self.dropped = 0
            client.expire(self.key, KEY_TTL)
        except redis.RedisError as exc:
            if not self.failing:
                log.warning("node %s: forwarding log lines failed (%s); keeping them and retrying", self.node, exc)
            self.failing = True
            self.backoff = min(5.0, max(0.2, self.backoff * 2))
            self.retry_at = time.monotonic() + self.backoff
            return False
        self.failing, self.backoff, self.retry_at = False, 0.0, 0.0
        return True

    def close(self, seconds: float = 10.0) -> None:
        """Send the rest and the ``eof`` mark, retrying for up to ``seconds``."""
        deadline = time.monotonic() + seconds
        while True:
            if self.flush():
                try:
                    logs.redis_client().xadd(self.key, {"node": self.node, "holder": self.holder, "eof": self.sent})
                    return
                except redis.RedisError:
                    pass
            if time.monotonic() >= deadline:
                log.error("node %s: %d log lines could not be forwarded (they are in logs/node%s.out)",
                          self.node, len(self.buffer), self.node)
                return
            time.sleep(0.2)


class Receiver:
    """Node 0's side: ``poll`` returns ``[(stream, [(rank, text), ...]), ...]`` in arrival order."""

    def __init__(self, job_id: int, lease_token: int, nnodes: int):
        self.key = stream_key(job_id, lease_token)
        self.nodes = set(range(1, nnodes))
        self.last_id = "0-0"
        self.next_index = {n: 0 for n in self.nodes}
        self.holder = {n: 0 for n in self.nodes}
        self.ended: set[int] = set()
        self.failing = False

    @property
    def done(self) -> bool:
        return self.ended >= self.nodes

    def poll(self, block_ms: int = 200) -> list[tuple[str, list[tuple[int, str]]]]:
        try:
            answer = logs.redis_client().xread({self.key: self.last_id}, count=100, block=block_ms)
        except redis.RedisError as exc:
            if not self.failing:
                log.warning("reading the other nodes' log lines failed (%s); retrying", exc)
            self.failing = True
            time.sleep(block_ms / 1000)
            return []
        self.failing = False
        out: list[tuple[str, list[tuple[int, str]]]] = []
        for _key, entries in answer or []:
            for entry_id, fields in entries:
                self.last_id = entry_id
                out.extend(self._take(fields))
        return out

    def _take(self, fields: dict) -> list[tuple[str, list[tuple[int, str]]]]:
        node = int(fields[b"node"])
        holder = int(fields.get(b"holder", 0))
        if holder < self.holder.get(node, 0):  # a lost worker's late lines: its place is another's now
            return []
        if holder > self.holder.get(node, 0):  # another worker took the node over: it counts from 0
            self.holder[node], self.next_index[node] = holder, 0
            self.ended.discard(node)
        if b"eof" in fields:
            self.ended.add(node)
            return []
        first = int(fields[b"first"])
        lines = json.loads(fields[b"lines"])
        skip = self.next_index.get(node, 0) - first  # a resend of lines already taken
        if skip >= len(lines):
            return []
        lines = lines[max(skip, 0):]
        self.next_index[node] = first + max(skip, 0) + len(lines)
        out: list[tuple[str, list[tuple[int, str]]]] = []
        for rank, stream, text in lines:  # group runs of one stream, keeping the order
            if out and out[-1][0] == stream:
                out[-1][1].append((rank, text))
            else:
                out.append((stream, [(rank, text)]))
        return out

    def forget(self) -> None:
        try:
            logs.redis_client().delete(self.key)
        except redis.RedisError:
            pass
