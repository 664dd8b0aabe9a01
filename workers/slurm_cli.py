"""Talking to Slurm's commands (sbatch, scontrol, sacct, scancel, sinfo) with argv lists, and
what their answers mean for a TrainHub job: ``JobState`` → ``SlurmState`` (final or not, an
exit code, a reason a person can read).

Every command runs with the pool's ``SLURM_CONF`` (``env``) and a timeout: a controller that
does not answer is an ``OSError``, never a hang of the worker.
"""
from __future__ import annotations

import dataclasses
import re
import subprocess
import time
from dataclasses import dataclass

TIMEOUT_SECONDS = 20
#: sacct knows a cancel a moment after scontrol does: asked this many times, this far apart
ACCOUNTING_TRIES, ACCOUNTING_WAIT_SECONDS = 10, 0.5
#: Slurm's job states that end a job, and what each means for TrainHub
FINAL = {"COMPLETED", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE", "REVOKED", "SPECIAL_EXIT", "VANISHED"}
#: TrainHub's own state for a job neither scontrol nor sacct knows (any more)
VANISHED = "VANISHED"
#: states after which Slurm itself starts the job again, or TrainHub should (from its checkpoint)
REQUEUED = {"PREEMPTED", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD"}


class SlurmError(OSError):
    """A Slurm command failed; the message carries its stderr."""


def run(argv: list[str], env: dict[str, str], *, timeout: float = TIMEOUT_SECONDS) -> str:
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {timeout:.0f} s (is slurmctld up?)") from None
    if done.returncode:
        raise SlurmError(f"{' '.join(argv[:2])} failed (exit {done.returncode}): {done.stderr.strip()[:500]}")
    return done.stdout


@dataclass(frozen=True)
class SlurmState:
    state: str  # Slurm's JobState, e.g. PENDING, RUNNING, COMPLETED
    reason: str = ""  # Slurm's Reason (Priority, Resources …) or "None"
    exit_code: int | None = None  # from ExitCode=N:S — N, or -S when killed by a signal
    nodes: str = ""  # the allocation, e.g. n[1-2]
    cancelled_by: str = ""  # sacct's "CANCELLED by UID", when accounting is on
    partition: str = ""  # the partition the job runs or waits in
    failed_nodes: str = ""  # for NODE_FAIL: which nodes went down and why, e.g. "n2 (disk on fire)"

    @property
    def final(self) -> bool:
        return self.state in FINAL

    @property
    def pending(self) -> bool:
        return self.state in ("PENDING", "CONFIGURING") or self.state in REQUEUED

    def describe(self) -> str:
        """Why the job ended, for the job's page."""
        if self.state == "COMPLETED":
            return "exited with code 0" if not self.exit_code else f"exited with code {self.exit_code}"
        if self.state == "TIMEOUT":
            return "time limit: Slurm stopped the job at its --time (timeout_minutes)"
        if self.state == "OUT_OF_MEMORY":
            return "out of memory: Slurm killed the job (ask for fewer processes or a node with more memory)"
        if self.state == "NODE_FAIL":
            which = self.failed_nodes or f"a node of the allocation {self.nodes}"
            return f"node failure: {which} went down; Slurm ended the job on every node of {self.nodes}"
        if self.state == "CANCELLED":
            if self.cancelled_by:
                return f"cancelled in Slurm by {self.cancelled_by}, outside TrainHub (scancel)"
            return "cancelled outside TrainHub (scancel; who did it only Slurm's accounting, sacct, would say)"
        if self.state == "PREEMPTED":
            return "preempted by Slurm"
        if self.state == VANISHED:
            return ("lost: Slurm no longer knows the job (it ended while no TrainHub worker followed it, longer ago "
                    "than Slurm's MinJobAge, and Slurm has no accounting to ask)")
        if self.state == "FAILED":
            return f"failed: exit code {self.exit_code}" + (f" ({self.reason})" if self.reason not in ("", "None") else "")
        return f"ended in Slurm state {self.state}" + (f" ({self.reason})" if self.reason not in ("", "None") else "")


def parse_duration(text: str) -> int:
    """Slurm's ``[D-]HH:MM:SS`` (or ``MM:SS``) → seconds; 0 for UNLIMITED or anything else."""
    m = re.match(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$", text or "")
    if not m:
        return 0
    days, hours, minutes, seconds = (int(g or 0) for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def parse_exit(text: str) -> int | None:
    """``ExitCode=N:S`` → N, or -S when a signal ended it."""
    m = re.match(r"^(\d+):(\d+)$", text or "")
    if not m:
        return None
    code, sig = int(m.group(1)), int(m.group(2))
    return -sig if sig and not code else code


def parse_scontrol(text: str) -> dict[str, str]:
    """``scontrol show job -o`` (one line of Key=Value pairs) → dict. Values without spaces only
    are needed here; fields like Command= that may hold spaces are cut at the next key."""
    fields: dict[str, str] = {}
    for m in re.finditer(r"(\w+(?:/\w+)?)=(\S*)", text):
        fields.setdefault(m.group(1), m.group(2))
    return fields


def job_state(job_id: str, env: dict[str, str]) -> SlurmState | None:
    """The job's state from ``scontrol show job`` (the controller keeps ended jobs for MinJobAge),
    else from ``sacct`` (accounting); None when neither knows it."""
    try:
        fields = parse_scontrol(run(["scontrol", "show", "job", "-o", job_id], env))
    except SlurmError as exc:
        if "Invalid job id" not in str(exc):
            raise
        return _sacct_state(job_id, env)
    state = fields.get("JobState", "UNKNOWN")
    out = SlurmState(state, fields.get("Reason", ""), parse_exit(fields.get("ExitCode", "")),
                     fields.get("NodeList", "").replace("(null)", ""), partition=fields.get("Partition", ""))
    if state == "NODE_FAIL":
        return dataclasses.replace(out, failed_nodes=failed_nodes(out.nodes, env))
    if state == "CANCELLED":  # who did it is known to accounting only
        for _ in range(ACCOUNTING_TRIES):
            acct = _sacct_state(job_id, env, unknown=SlurmState("UNKNOWN"))
            if acct is None or acct.state == "CANCELLED":
                break
            # slurmctld sends the job's end to slurmdbd a moment after it ends: ask again
            time.sleep(ACCOUNTING_WAIT_SECONDS)
        if acct and acct.cancelled_by:
            return dataclasses.replace(out, cancelled_by=acct.cancelled_by)
    return out


def _sacct_state(job_id: str, env: dict[str, str], unknown: SlurmState | None = None) -> SlurmState | None:
    """The job's row in accounting; None when there is no accounting, ``unknown`` when it has no row."""
    try:
        out = run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode,Reason,NodeList"], env)
    except SlurmError:  # accounting off (accounting_storage/none) or slurmdbd down
        return None
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) >= 4:
            state, _, by = parts[0].partition(" by ")
            return SlurmState(state.strip(), parts[2], parse_exit(parts[1]), parts[3], _user(by.strip()))
    return unknown


def _user(uid: str) -> str:
    if not uid.isdigit():
        return uid
    import pwd

    try:
        return pwd.getpwuid(int(uid)).pw_name
    except KeyError:
        return f"uid {uid}"


def failed_nodes(nodelist: str, env: dict[str, str]) -> str:
    """Which nodes of ``nodelist`` are down, drained or failing now, with the reason an operator or
    slurmctld gave (``n2 (disk on fire)``); "" when none is (or sinfo cannot say)."""
    if not nodelist:
        return ""
    try:
        out = run(["sinfo", "-h", "-N", "-n", nodelist, "-o", "%N|%t|%E"], env)
    except SlurmError:
        return ""
    down = []
    for line in out.splitlines():
        name, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        if state.rstrip("*~#!%$@^-").startswith(("down", "drain", "fail")) and name not in (n for n, _ in down):
            down.append((name, reason.strip() if reason.strip() not in ("", "none") else state))
    return ", ".join(f"{name} ({reason})" for name, reason in down)


def queue_position(job_id: str, partition: str, env: dict[str, str]) -> int | None:
    """The job's place among the partition's pending jobs in Slurm's priority order (1 = next),
    as ``squeue --sort=-p,i`` lists them; None when it is not pending there (or squeue cannot say)."""
    argv = ["squeue", "-h", "-t", "PD", "-o", "%i", "--sort=-p,i"] + ([f"--partition={partition}"] if partition else [])
    try:
        ids = run(argv, env).split()
    except SlurmError:
        return None
    return ids.index(job_id) + 1 if job_id in ids else None


def time_left(job_id: str, env: dict[str, str]) -> int | None:
    """Seconds the job has left before its time limit (``squeue %L``); None if unknown or unlimited."""
    try:
        return parse_duration(run(["squeue", "-h", "-j", job_id, "-o", "%L"], env).strip()) or None
    except SlurmError:
        return None


def hostnames(nodelist: str, env: dict[str, str]) -> list[str]:
    """``n[1-2]`` → ["n1", "n2"]."""
    if not nodelist:
        return []
    return run(["scontrol", "show", "hostnames", nodelist], env).split()


def node_address(node: str, env: dict[str, str]) -> str:
    """A node's NodeAddr (the address its peers reach it at)."""
    fields = parse_scontrol(run(["scontrol", "show", "node", "-o", node], env))
    return fields.get("NodeAddr") or node
