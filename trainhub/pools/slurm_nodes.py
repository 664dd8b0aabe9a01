"""A Slurm pool's nodes as its page shows them: ``scontrol show node -o`` run by the web host with
the pool's ``SLURM_CONF``, one row per node of the pool's partition (its state, GPUs and CPUs,
allocated of configured). The web host is a submit host too (see docs/POOLS.md); where Slurm does
not answer, the page says why instead of the table."""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field

TIMEOUT_SECONDS = 5


@dataclass
class Node:
    name: str
    state: str  # e.g. IDLE, MIXED, ALLOCATED, DOWN*, DRAIN
    reason: str = ""  # why an administrator or Slurm took it out (down, drained)
    gpus: int = 0
    gpus_used: int = 0
    cpus: int = 0
    cpus_used: int = 0
    jobs: list = field(default_factory=list)  # the TrainHub jobs running on it (filled in by the page)

    @property
    def healthy(self) -> bool:
        return not re.search(r"DOWN|DRAIN|FAIL|NOT_RESPONDING|\*", self.state)


def _fields(line: str) -> dict[str, str]:
    # Reason= may hold spaces and comes with a [user@time] suffix: take it up to the next Key=
    out = {m.group(1): m.group(2) for m in re.finditer(r"(\w+(?:/\w+)?)=(\S*)", line)}
    reason = re.search(r"\bReason=(.*?)(?: \w+=|$)", line)
    out["Reason"] = reason.group(1).strip() if reason else ""
    return out


def _gpus(text: str) -> int:
    """``gpu:2``, ``gpu:a100:4(S:0)``, ``gres/gpu=2`` → the count; 0 without GPUs."""
    m = re.search(r"gpu(?::[\w-]+)?[:=](\d+)", text or "")
    return int(m.group(1)) if m else 0


def parse_nodes(text: str, partition: str = "") -> list[Node]:
    nodes = []
    for line in text.splitlines():
        f = _fields(line)
        if not f.get("NodeName"):
            continue
        if partition and partition not in f.get("Partitions", "").split(","):
            continue
        alloc = f.get("AllocTRES", "")
        cpus_used = re.search(r"cpu=(\d+)", alloc)
        nodes.append(Node(f["NodeName"], f.get("State", "?"), f["Reason"], _gpus(f.get("Gres", "")), _gpus(alloc),
                          int(f.get("CPUTot", 0) or 0), int(cpus_used.group(1)) if cpus_used else 0))
    return nodes


def pool_nodes(pool) -> tuple[list[Node], str]:
    """The nodes of ``pool``'s partition (all nodes for the cluster's default), or ``([], why not)``."""
    env = {**os.environ, **({"SLURM_CONF": pool.slurm_conf} if pool.slurm_conf else {})}
    try:
        done = subprocess.run(["scontrol", "show", "node", "-o"], env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_SECONDS)
    except FileNotFoundError:
        return [], "scontrol is not installed on the web host: install Slurm's client commands to see the nodes"
    except subprocess.TimeoutExpired:
        return [], f"slurmctld did not answer within {TIMEOUT_SECONDS} s"
    if done.returncode:
        return [], f"scontrol show node failed: {done.stderr.strip()[:300]}"
    return parse_nodes(done.stdout, pool.partition), ""
