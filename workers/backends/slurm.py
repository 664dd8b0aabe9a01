"""The ``slurm`` backend: a job's attempt is one Slurm batch job, whatever its number of nodes.

``start`` writes ``<run dir>/slurm-<attempt>.sh`` — one ``srun`` line starting
``workers.slurm_node`` once per node, every word ``shlex.quote``d from an argv list — and
submits it with ``sbatch --parsable`` (``--nodes``, ``--ntasks-per-node=1``, ``--gpus-per-node``,
``--time``, ``--job-name``, ``--signal``, partition/account/QoS of the pool as argv words).
The nodes send their lines through Redis (``workers.gang_logs``); this handle receives them.
``poll`` asks ``scontrol``/``sacct`` at most every ``POLL_SECONDS``; ``cancel`` is
``scancel --signal=TERM`` (to the launchers) then, after the grace, ``scancel``.
"""
from __future__ import annotations

import re
import shlex
import sys
import threading
import time
from dataclasses import dataclass, field

from workers import slurm_cli
from workers.backends.base import Output, OutputQueue, RunRequest
from workers.slurm_node import REDIS_VAR, TIME_LIMIT_EXIT

POLL_SECONDS = 1.0
#: exit code of a job Slurm ended without one of its own (cancelled, timed out, node failure)
KILLED = -15


@dataclass(frozen=True)
class SlurmOptions:
    """What Slurm needs beyond the argv: the pool's defaults and the job's resources."""

    slurm_conf: str = ""
    partition: str = ""
    account: str = ""
    qos: str = ""
    nodes: int = 1
    procs_per_node: int = 1
    gpus_per_node: int = 0
    time_minutes: int = 120
    job_name: str = "trainhub"
    #: ``trainhub <instance> job <id>``: which deployment's job (``owner_tag``); the attempt is added
    owner: str = ""
    #: added to the attempt in the comment: a cross-site job's Slurm site taken over by another
    #: worker (``.h<n>``) is another run of the attempt, so the lost worker's batch job is cancelled
    holder: str = ""
    lease_token: int = 0
    grace_seconds: float = 20.0
    redis_url: str = field(default="", repr=False)
    #: the Redis stream its nodes send their lines to; "" = the job's (``gang_logs.stream_key`` of the
    #: job and ``lease_token``). A cross-site job's Slurm site has its own per start (``workers.crosssite``).
    stream: str = ""


def cancel_orphans(opts: SlurmOptions, attempt: int, env: dict[str, str]) -> list[str]:
    """Cancel the Slurm jobs an earlier attempt of this TrainHub job left behind; their ids.

    A worker lost between ``sbatch`` answering and the ``SlurmRun`` row being written leaves a
    Slurm job nobody follows; its attempt is fenced (it writes nothing) but it would hold its
    nodes until its time limit. Before the next attempt submits, every job of this job's name
    whose comment says it is this deployment's job (``opts.owner``) and another attempt goes.
    """
    if not opts.owner:
        return []
    try:
        listed = slurm_cli.run(["squeue", "-h", f"--name={safe_name(opts.job_name)}", "-o", "%i|%k"], env)
    except slurm_cli.SlurmError:
        return []
    orphans = []
    for row in listed.splitlines():
        job_id, _, comment = row.strip().partition("|")
        prefix, _, other = comment.rpartition(" attempt ")
        if prefix == opts.owner and other != f"{attempt}{opts.holder}" and job_id:
            orphans.append(job_id)
    if orphans:
        try:
            slurm_cli.run(["scancel", *orphans], env)
        except slurm_cli.SlurmError:
            pass  # ended meanwhile
    return orphans


def safe_name(name: str) -> str:
    """A Slurm job name from any string: letters, digits, ``._-`` only, at most 64 characters."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64] or "trainhub"


def sbatch_argv(run: RunRequest, opts: SlurmOptions, script: str) -> list[str]:
    argv = ["sbatch", "--parsable", f"--job-name={safe_name(opts.job_name)}", f"--nodes={opts.nodes}",
            "--ntasks-per-node=1", f"--cpus-per-task={opts.procs_per_node}", f"--time={max(1, opts.time_minutes)}",
            f"--chdir={run.cwd}", f"--output={run.run_dir}/slurm-%j.out",
            # Slurm's own warning before the time limit: the runner checkpoints on SIGTERM
            f"--signal=TERM@{int(opts.grace_seconds) + 10}", "--export=ALL",
            # TrainHub retries (a new attempt, a new log stream); a run Slurm requeued itself would
            # send its lines again from index 0 on the same stream, where they look like resends
            "--no-requeue"]
    if opts.owner:
        argv.append(f"--comment={opts.owner} attempt {run.attempt}{opts.holder}")
    if opts.gpus_per_node:
        argv.append(f"--gpus-per-node={opts.gpus_per_node}")
    for flag, value in (("partition", opts.partition), ("account", opts.account), ("qos", opts.qos)):
        if value:
            argv.append(f"--{flag}={value}")
    return argv + [script]


def batch_script(run: RunRequest, opts: SlurmOptions) -> str:
    """The batch script: a comment and one srun line; every word quoted (nothing the user wrote
    is ever read by the shell as code)."""
    node = [sys.executable, "-m", "workers.slurm_node", "--job", str(run.job_id), "--token", str(opts.lease_token),
            "--procs-per-node", str(opts.procs_per_node), "--log-dir", str(run.run_dir / "logs"),
            *(["--stream", opts.stream] if opts.stream else []), "--", *run.argv]
    srun = ["srun", "--ntasks-per-node=1", f"--nodes={opts.nodes}", "--kill-on-bad-exit=1", "--unbuffered", *node]
    return ("#!/bin/bash\n"
            f"# TrainHub job {run.job_id}, attempt {run.attempt}: one workers.slurm_node per node\n"
            f"exec {' '.join(shlex.quote(word) for word in srun)}\n")


class SlurmHandle:
    """A submitted Slurm job. ``SlurmHandle(run, opts)`` submits it; ``SlurmHandle.attach`` follows
    one submitted before (by a worker that since restarted) from ``cursor``: per node, the number
    of its lines already in the job's log, so none is lost and none is stored twice."""

    def __init__(self, run: RunRequest | None, opts: SlurmOptions, *, job_id: str = "", job: int = 0,
                 cursor: dict | None = None, env: dict[str, str] | None = None):
        self.opts = opts
        self.env = env or {}
        self.orphans: list[str] = []  # Slurm jobs of earlier attempts cancelled before this one
        if run is not None:
            self.env = {**run.env, REDIS_VAR: opts.redis_url}
            if opts.slurm_conf:
                self.env["SLURM_CONF"] = opts.slurm_conf
            run.run_dir.mkdir(parents=True, exist_ok=True)
            script = run.run_dir / f"slurm-{run.attempt}.sh"
            script.write_text(batch_script(run, opts), encoding="utf-8")
            self.orphans = cancel_orphans(opts, run.attempt, self.env)
            job_id = slurm_cli.run(sbatch_argv(run, opts, str(script)), self.env).strip().split(";")[0]
            job = run.job_id
        self.job_id = job_id
        self.state: slurm_cli.SlurmState = slurm_cli.SlurmState("PENDING")
        self.checked = 0.0
        self.cancelled = False  # by TrainHub (so CANCELLED is ours, not an operator's)
        self.kill_at: float | None = None
        self._nodes = ("", "")  # Slurm's node list and its expansion, for describe()
        self._start_receiver(job, cursor or {})

    @classmethod
    def attach(cls, opts: SlurmOptions, job_id: str, job: int, cursor: dict, env: dict[str, str]) -> "SlurmHandle":
        """Follow the Slurm job ``job_id`` (TrainHub job ``job``) submitted before; ``opts.lease_token``
        must be the token it was submitted under (its nodes send their lines under it)."""
        env = {**env, **({"SLURM_CONF": opts.slurm_conf} if opts.slurm_conf else {})}
        return cls(None, opts, job_id=job_id, job=job, cursor=cursor, env=env)

    def _start_receiver(self, job: int, cursor: dict) -> None:
        from workers import gang_logs  # the worker side: Django is set up

        self._out = OutputQueue()  # (batches, cursor after them): the receiver waits while it is full
        self.receiver = gang_logs.Receiver(job, self.opts.lease_token, self.opts.nodes)
        self.receiver.key = self.opts.stream or self.receiver.key
        self.receiver.nodes = set(range(self.opts.nodes))  # every node, node 0 included, sends through Redis
        self.receiver.next_index = {n: int(cursor.get(str(n), 0)) for n in self.receiver.nodes}
        #: per node (as a string, JSON's way): its lines returned by lines() so far
        self.cursor = {str(n): i for n, i in self.receiver.next_index.items()}
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self.receiver.done and not self._closing.is_set():
            items = self.receiver.poll(200)
            if items:
                self._out.put((items, {str(n): i for n, i in self.receiver.next_index.items()}),
                              lines=sum(len(batch) for _stream, batch in items))

    def refresh(self, force: bool = False) -> slurm_cli.SlurmState:
        """Slurm's view of the job, asked at most every POLL_SECONDS (a controller error keeps the last)."""
        now = time.monotonic()
        if force or now - self.checked >= POLL_SECONDS:
            self.checked = now
            try:
                self.state = slurm_cli.job_state(self.job_id, self.env) or slurm_cli.SlurmState(slurm_cli.VANISHED)
            except slurm_cli.SlurmError:
                pass  # asked again next time; the lease, not this, decides about a lost job
        return self.state

    def poll(self) -> int | None:
        if self.kill_at is not None and time.monotonic() >= self.kill_at:
            self.kill_at = None
            self._scancel()
        state = self.refresh()
        if not state.final:
            return None
        if state.exit_code is not None and state.state in ("COMPLETED", "FAILED"):
            return state.exit_code if state.exit_code or state.state == "COMPLETED" else 1
        return KILLED

    def cancel(self, grace: float) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        if self.refresh(force=True).pending:  # nothing runs yet: no checkpoint to wait for
            self._scancel()
            return
        self.kill_at = time.monotonic() + grace
        # The job steps only, not the batch step (--full): srun there would take SIGTERM as
        # "terminate the step now" and kill every launcher before the runner could checkpoint.
        self._scancel("--signal=TERM")

    def _scancel(self, *flags: str) -> None:
        try:
            slurm_cli.run(["scancel", *flags, self.job_id], self.env)
        except slurm_cli.SlurmError:
            pass  # already ended

    def pending_reason(self) -> str:
        """Slurm's reason while the job waits (Priority, Resources …), else ""."""
        state = self.refresh()
        return state.reason if state.pending and state.reason not in ("", "None") else ""

    def reason(self) -> str:
        """Why the job ended, for its page: ours ("cancelled") or Slurm's."""
        if self.cancelled:  # after scancel --signal=TERM the job may end as FAILED, or CANCELLED
            return "cancelled"
        if self.state.state == "FAILED" and self.state.exit_code == TIME_LIMIT_EXIT:
            # its nodes stopped on --signal's warning before the limit: the runner checkpointed and exited
            return slurm_cli.SlurmState("TIMEOUT").describe()
        return self.state.describe()

    def lines(self, max_lines: int | None = None) -> Output:
        out: Output = []
        for items, cursor in self._out.take(max_lines):
            out.extend(items)
            self.cursor = cursor
        return out

    def close(self, timeout: float) -> None:
        if not self.refresh(force=True).final:
            self._scancel()
        self._out.release()
        self._thread.join(timeout)
        self._closing.set()
        self.receiver.forget()

    def detach(self) -> None:
        """Stop following the job and leave it running (its worker shuts down; another adopts it)."""
        self._closing.set()
        self._thread.join(1.0)

    def describe(self) -> str:
        """``slurm job 12 on n1,n2`` once allocated, else ``slurm job 12 (pending)``."""
        nodes = self.refresh().nodes
        if nodes and self._nodes[0] != nodes:
            try:
                self._nodes = (nodes, ",".join(slurm_cli.hostnames(nodes, self.env)))
            except slurm_cli.SlurmError:
                self._nodes = (nodes, nodes)  # Slurm's compressed form (n[1-2]) says it as well
        return f"slurm job {self.job_id}" + (f" on {self._nodes[1]}" if nodes else " (pending)")


class SlurmBackend:
    def __init__(self, options: SlurmOptions | None = None):
        self.options = options or SlurmOptions()

    def start(self, run: RunRequest) -> SlurmHandle:
        return SlurmHandle(run, self.options)
