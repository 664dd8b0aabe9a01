"""Runs one job attempt: the launcher as a subprocess in its own process group, every
rank's output pumped into the log pipeline, events turned into progress and metrics,
the lease renewed, cancellation and timeout enforced.
"""
from __future__ import annotations

import errno
import logging
import math
import os
import shutil
import queue
import select
import signal
import sys
import threading
import time
from pathlib import Path
from subprocess import PIPE, Popen

from django.conf import settings
from django.db import connection

from trainhub.jobs import logs, retention
from trainhub.jobs.lifecycle import DB_ERRORS, Outcome, drop_connection, job_renew
from trainhub.jobs.models import Job, Status
from trainhub.pools.models import Workspace
from workers.runner import launch
from workers.runner.config import dump_yaml
from workers.runner.report import read_events

log = logging.getLogger(__name__)
MAX_LINE = 16_384  # characters; longer lines are cut with a marker
MAX_LINE_BYTES = MAX_LINE * 4
PARTIAL_SECONDS = 1.0  # how often an unfinished progress-bar line shows its latest state
EVENTS_SECONDS = 1.0  # how often metrics and progress are read from events.jsonl
BATCH_SECONDS = 0.05
FLUSH_MAX = 20_000
#: lines kept in memory while the database is unavailable; beyond it new lines are counted,
#: not kept, and a marker line says how many were dropped
PENDING_MAX = 200_000
DB_BACKOFF_MAX = 5.0  # seconds between retries while the database is unavailable
DISK_FULL_MARKERS = ("no space left on device", "errno 28", "file too large", "errno 27", "disk quota exceeded")
#: set when the worker is shutting down: running jobs stop and go back to the queue
SHUTDOWN = threading.Event()


def run_dir_for(job: Job) -> Path:
    return Path(settings.TRAINHUB_RUNS_DIR) / f"job-{job.pk}"


def _finish(raw: bytes, dropped: int = 0) -> tuple[int, str]:
    """One complete line: its rank (torchrun's ``[rankN]:`` prefix) and its text.

    A progress bar that rewrote the line with ``\\r`` keeps only its latest state; a line
    longer than ``MAX_LINE`` characters is cut with a marker saying how much was dropped.
    """
    return _finish_text(raw.decode("utf-8", "replace"), dropped)


def _finish_text(text: str, dropped: int = 0) -> tuple[int, str]:
    rank = 0
    match = launch.RANK_LINE.match(text)
    if match:
        rank, text = int(match.group(1)), text[match.end():]
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
        match = launch.RANK_LINE.match(text)
        if match:
            rank, text = int(match.group(1)), text[match.end():]
    if len(text) > MAX_LINE or dropped:
        cut = len(text[MAX_LINE:].encode("utf-8", "replace")) + dropped
        text = f"{text[:MAX_LINE]} … [line truncated: {cut} more bytes]"
    return rank, text


class _LineSplitter:
    """Turns chunks of one pipe into lines, without waiting for a newline forever.

    Reading chunks (not ``readline``) lets a progress bar that only ever writes ``\\r``
    show its latest state at most every ``PARTIAL_SECONDS`` instead of nothing until the
    bar finishes; and a line without end cannot grow the buffer past ``MAX_LINE_BYTES``.
    """

    def __init__(self):
        self.buf = b""
        self.dropped = 0  # bytes of an over-long line thrown away so far
        self.shown = None  # the partial state last emitted for the current line
        self.shown_at = 0.0
        self.since = None  # when the current unfinished line was first seen

    def feed(self, chunk: bytes) -> list[tuple[int, str]]:
        out = []
        if self.dropped:  # inside an over-long line: skip to its end
            end = chunk.find(b"\n")
            if end < 0:
                self.dropped += len(chunk)
                return out
            self.dropped += end
            out.append(_finish(self.buf, self.dropped))
            self.buf, self.dropped, self.shown, chunk = b"", 0, None, chunk[end + 1:]
        data = self.buf + chunk
        end = data.rfind(b"\n")
        if end >= 0:
            self.since = None
            head = data[:end]
            texts = head.decode("utf-8", "replace").split("\n")
            self.buf = data[end + 1:]
            if self.shown is not None:
                line = _finish_text(texts.pop(0))
                if line != self.shown:  # else this final state was already shown as a partial line
                    out.append(line)
                self.shown = None
            plain = all(len(t) <= MAX_LINE for t in texts) if len(head) > MAX_LINE else True
            if plain and b"\r" not in head and b"[rank" not in head:
                out.extend([(0, t) for t in texts])  # the common case, at a fraction of the cost
            else:
                out.extend([_finish_text(t) for t in texts])
        else:
            self.buf = data
        if len(self.buf) > MAX_LINE_BYTES:
            cr = self.buf.rfind(b"\r")
            if cr > 0:
                self.buf = self.buf[cr:]  # a progress bar: only its latest state matters
            if len(self.buf) > MAX_LINE_BYTES:
                self.dropped = len(self.buf) - MAX_LINE_BYTES
                self.buf = self.buf[:MAX_LINE_BYTES]
        return out

    def partial(self, now: float) -> list[tuple[int, str]]:
        """The latest state of an unfinished ``\\r`` line, if it changed and is due."""
        if b"\r" not in self.buf or self.dropped:
            return []
        if self.since is None:
            self.since = now  # a bar that finishes within PARTIAL_SECONDS stays one line
        if now - max(self.since, self.shown_at) < PARTIAL_SECONDS:
            return []
        line = _finish(self.buf)
        if not line[1] or line == self.shown:
            return []
        self.shown, self.shown_at = line, now
        cr = self.buf.rfind(b"\r")
        self.buf = self.buf[:self.buf.find(b"\r")] + self.buf[cr:] if cr > 0 else self.buf
        return [line]

    def close(self) -> list[tuple[int, str]]:
        if not self.buf and not self.dropped:
            return []
        line = _finish(self.buf, self.dropped)
        return [] if line == self.shown else [line]


def _pump(pipe, stream: str, out: queue.Queue) -> None:
    """Read one pipe in chunks; put ``(stream, [(rank, text), ...])`` on ``out``."""
    fd = pipe.fileno()
    splitter = _LineSplitter()
    while True:
        ready, _, _ = select.select([fd], [], [], PARTIAL_SECONDS / 2)
        lines = []
        if ready:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            lines = splitter.feed(chunk)
        lines += splitter.partial(time.monotonic())
        if lines:
            out.put((stream, lines))
    tail = splitter.close()
    if tail:
        out.put((stream, tail))
    pipe.close()


def pump_output(proc: Popen, out: queue.Queue) -> list[threading.Thread]:
    """A reader thread per pipe of ``proc`` (stdout as "o", stderr as "e"), putting lines on ``out``."""
    readers = [threading.Thread(target=_pump, args=(pipe, stream, out), daemon=True)
               for pipe, stream in ((proc.stdout, "o"), (proc.stderr, "e"))]
    for reader in readers:
        reader.start()
    return readers


class Execution:
    def __init__(self, job: Job, env_extra: dict[str, str] | None = None, launch_kwargs: dict | None = None):
        self.job = job
        self.env_extra = dict(env_extra or {})  # from the scheduler, e.g. CUDA_VISIBLE_DEVICES of the GPU lease
        self.launch_kwargs = dict(launch_kwargs or {})  # a gang's node: nnodes, node_rank, rdzv_endpoint, rdzv_id
        self.spec = job.spec_model
        self.run_dir = run_dir_for(job)
        self.seq = logs.next_seq(job.pk)
        # lines kept per job (0: all): the pool's setting, else TRAINHUB_LOG_RETENTION; cut while it runs
        self.retention = getattr(job.pool, "log_retention_lines", 0) or retention.limit_for(job.pool.name)
        if 0 < self.retention < retention.MINIMUM:
            self.retention = retention.MINIMUM
        self.next_cut = self.seq + max(1_000, self.retention // 10)
        self.lines: queue.Queue = queue.Queue()
        self.pending: list[tuple[int, int, str, str]] = []  # seqs assigned, not yet stored
        self.dropped = 0  # lines not kept because the pending buffer was full
        self.db_backoff = 0.0
        self.db_retry_at = 0.0
        self.db_down_since: float | None = None
        self.activity = time.monotonic()  # last output or event from the job (the watchdog's clock)
        self.tail: list[str] = []  # the job's last lines, to tell a full disk from other failures
        self.events_offset = 0
        self.proc: Popen | None = None
        self.readers: list[threading.Thread] = []

    # -- output -------------------------------------------------------------
    def system(self, text: str) -> None:
        self.lines.put(("s", [(0, text)]))

    def _take(self, items: list[tuple[int, str]], stream: str) -> None:
        if len(self.pending) >= PENDING_MAX:
            self.dropped += len(items)
            return
        if self.dropped:  # room again: say where lines are missing, in seq order
            self.pending.append((self.seq, 0, "s", f"[{self.dropped} lines dropped: the database was unavailable "
                                                   f"and {PENDING_MAX} lines were already waiting]"))
            self.seq += 1
            self.dropped = 0
        self.pending.extend([(self.seq + i, rank, stream, text) for i, (rank, text) in enumerate(items)])  # Line-shaped
        self.seq += len(items)

    def flush_lines(self) -> bool:
        """Store what the job printed. Returns False while the database is unavailable: the
        lines stay pending (seqs assigned, so a retry neither loses nor duplicates them)."""
        while True:
            try:
                stream, items = self.lines.get_nowait()
            except queue.Empty:
                break
            if stream != "s":
                self.activity = time.monotonic()
                self.tail = (self.tail + [t for _, t in items[-20:]])[-20:]
            self._take(items, stream)
        if not self.pending and not self.dropped:
            return True
        if time.monotonic() < self.db_retry_at:
            return False
        try:
            while self.pending:  # bounded statements, even after a burst
                logs.append_lines(self.job.pk, self.pending[:FLUSH_MAX])
                del self.pending[:FLUSH_MAX]
            if self.dropped:
                self._take([], "s")  # the marker alone
                return self.flush_lines()
            if self.retention and self.seq >= self.next_cut:
                retention.enforce(self.job.pk, self.seq, self.retention, self.job.pool.name)
                self.next_cut = self.seq + max(1_000, self.retention // 10)
        except DB_ERRORS as exc:
            self._db_failed(exc)
            return False
        self._db_ok()
        return True

    def _db_failed(self, exc: Exception) -> None:
        now = time.monotonic()
        if self.db_down_since is None:
            self.db_down_since = now
            log.warning("job %s: database unavailable (%s); keeping %d lines and retrying", self.job.pk, exc,
                        len(self.pending))
        self.db_backoff = min(DB_BACKOFF_MAX, max(0.1, self.db_backoff * 2))
        self.db_retry_at = now + self.db_backoff
        if not connection.in_atomic_block:
            drop_connection()

    def _db_ok(self) -> None:
        if self.db_down_since is not None:
            log.warning("job %s: database back after %.1f s", self.job.pk, time.monotonic() - self.db_down_since)
        self.db_down_since, self.db_backoff, self.db_retry_at = None, 0.0, 0.0

    def drain(self, seconds: float) -> bool:
        """Flush until nothing is pending or ``seconds`` pass (the job's end, a kill)."""
        deadline = time.monotonic() + seconds
        while not self.flush_lines():
            if time.monotonic() >= deadline:
                log.error("job %s: %d log lines could not be stored", self.job.pk, len(self.pending))
                return False
            time.sleep(0.1)
        return True

    def pump_events(self) -> None:
        """Store new metrics and progress; the offset moves only once they are stored, so
        events read during a database outage are read again (metrics are idempotent per step)."""
        try:
            events, offset = read_events(self.run_dir, self.events_offset)
            self._store_events(events)
        except DB_ERRORS as exc:
            self._db_failed(exc)
            return
        if events:
            self.activity = time.monotonic()
        self.events_offset = offset

    def _store_events(self, events: list[dict]) -> None:
        progress = None
        for event in events:
            kind = event.get("type")
            try:
                if kind == "metrics" and isinstance(event.get("values"), dict):
                    values = {str(k): float(v) for k, v in event["values"].items()
                              if isinstance(v, (int, float)) and math.isfinite(v)}
                    if values:
                        logs.record_metrics(self.job.pk, int(event.get("step", 0)), values)
                elif kind in ("progress", "start") and "total_steps" in event:
                    progress = (int(event.get("step", 0)), int(event["total_steps"]))
            except (TypeError, ValueError):  # a malformed event is skipped, never fatal
                log.warning("job %s: skipped malformed event %r", self.job.pk, event)
        if progress:
            logs.record_progress(self.job.pk, *progress)

    # -- process ------------------------------------------------------------
    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._seed_checkpoint()
        config_path = self.run_dir / "job.yaml"
        config_path.write_text(dump_yaml(self.spec), encoding="utf-8")
        workspace_dir = None
        if self.spec.script:
            workspace_dir = Path(Workspace.objects.get(name=self.spec.script.workspace).path)
        argv = launch.argv(self.spec, config_path, self.run_dir, workspace_dir=workspace_dir, **self.launch_kwargs)
        env = launch.env(self.spec, self.run_dir, workspace_dir=workspace_dir)
        for name in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "TRAINHUB_SECRET_KEY", "REDIS_URL"):
            env.pop(name, None)  # training code gets no access to the dashboard's secrets
        env.update(self.env_extra)
        self.system(f"attempt {self.job.attempt}: starting {' '.join(argv)}")
        guarded = [sys.executable, "-m", "workers.guard", str(os.getpid()), "--", *argv]
        self.proc = Popen(guarded, stdout=PIPE, stderr=PIPE, cwd=launch.cwd(self.spec, self.run_dir, workspace_dir),
                          env=env, start_new_session=True)
        self.readers.extend(pump_output(self.proc, self.lines))

    def _seed_checkpoint(self) -> None:
        """``checkpoint.start_from``: copy another job's checkpoint in, so the runner resumes from it.
        Only on the first attempt's start; a retry resumes from this job's own newer checkpoints."""
        source = self.spec.checkpoint.start_from
        target_root = self.run_dir / "checkpoints"
        if not source or (target_root.is_dir() and any(target_root.iterdir())):
            return
        origin = Path(settings.TRAINHUB_RUNS_DIR) / source  # the spec pattern allows job-N/checkpoints/step-M only
        shutil.copytree(origin, target_root / origin.name)
        self.system(f"starting from checkpoint {source}")

    def kill(self, why: str) -> None:
        """SIGTERM the whole process group, give it the grace period, then SIGKILL."""
        assert self.proc is not None
        self.system(f"stopping: {why}")
        _signal_group(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + settings.TRAINHUB_KILL_GRACE_SECONDS
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.flush_lines()
            time.sleep(0.1)
        _signal_group(self.proc.pid, signal.SIGKILL)  # also reaps grandchildren that ignored SIGTERM
        self.proc.wait()

    def renew(self, now: float) -> tuple[str, str] | None:
        """Renew the lease; a stop reason if the job must stop. A database error is not a lost
        lease, but a worker that cannot renew for longer than the lease must assume another
        worker took the job over (the lease is its fencing) and stop it."""
        try:
            status = job_renew(self.job)
        except DB_ERRORS as exc:
            self._db_failed(exc)
            if now - self.renewed > settings.TRAINHUB_LEASE_SECONDS:
                return (Status.FAILED, f"this worker lost the job's lease: the database was unreachable for "
                                       f"{now - self.renewed:.0f} s")
            return None
        self.renewed = now
        if status is None:
            return (Status.FAILED, "this worker lost the job's lease")
        if status == Status.CANCELLING:
            return (Status.CANCELLED, "cancelled")
        return None

    def run(self) -> Outcome:
        try:
            self.start()
        except Exception as exc:  # bad workspace, unwritable run dir, launcher missing
            log.exception("job %s could not start", self.job.pk)
            why = f"could not start: {exc}"
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                why = f"could not start: the disk of the run directory {self.run_dir.parent} is full ({exc})"
            self.system(why)
            self.drain(60)
            return Outcome(Status.FAILED, None, why)
        timeout = self.spec.timeout_minutes * 60
        watchdog = self.spec.watchdog_minutes * 60
        started = time.monotonic()
        self.activity = self.renewed = started
        renew_every = max(1.0, settings.TRAINHUB_LEASE_SECONDS / 3)
        next_renew = started + renew_every
        next_events = started + EVENTS_SECONDS
        stop_reason: tuple[str, str] | None = None
        flushed = time.monotonic()
        while self.proc.poll() is None:
            time.sleep(max(0.0, BATCH_SECONDS - (time.monotonic() - flushed)))  # a flush every 50 ms, not 50 ms + flush
            flushed = time.monotonic()
            self.flush_lines()
            now = time.monotonic()
            if now >= next_events:  # charts and progress follow within about a second
                next_events = now + EVENTS_SECONDS
                self.pump_events()
            if now >= next_renew:
                next_renew = now + (renew_every if self.db_down_since is None else min(renew_every, 1.0))
                stop_reason = self.renew(now)
            if stop_reason is None and SHUTDOWN.is_set():
                stop_reason = (Status.QUEUED, "the worker shut down; the job goes back to the queue")
            if stop_reason is None and now - started > timeout:
                stop_reason = (Status.FAILED, f"timed out after {self.spec.timeout_minutes} min")
            if stop_reason is None and watchdog and now - self.activity > watchdog:
                stop_reason = (Status.FAILED, f"watchdog: no output and no progress for "
                                              f"{self.spec.watchdog_minutes:g} min")
            if stop_reason:
                self.kill(stop_reason[1])
                break
        code = self.proc.wait()
        _signal_group(self.proc.pid, signal.SIGKILL)  # no rank or data-loader worker outlives the job
        for reader in self.readers:
            reader.join(timeout=5)
        self.flush_lines()  # also fills self.tail with the last lines
        self.pump_events()
        if stop_reason:
            outcome = Outcome(stop_reason[0], code, stop_reason[1])
        elif code == 0:
            outcome = Outcome(Status.SUCCEEDED, 0, "exited with code 0")
        elif self.disk_full():
            outcome = Outcome(Status.FAILED, code, f"the disk of the run directory {self.run_dir.parent} is full "
                                                   f"(no space left on device); {_describe_exit(code)}")
        else:
            outcome = Outcome(Status.FAILED, code, _describe_exit(code))
        self.system(f"finished: {outcome.reason}")
        self.drain(max(30.0, settings.TRAINHUB_LEASE_SECONDS))
        self.pump_events()  # events read during an outage, now that the database is back
        return outcome

    def disk_full(self) -> bool:
        """The job failed because its run directory's disk is full: it said so, or no space is left."""
        said = any(marker in line.lower() for line in self.tail for marker in DISK_FULL_MARKERS)
        try:
            return said or shutil.disk_usage(self.run_dir).free < 64 * 1024
        except OSError:
            return said


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def execute(job: Job, env_extra: dict[str, str] | None = None, launch_kwargs: dict | None = None) -> Outcome:
    """Run one attempt; ``env_extra`` is added to the launched command's environment and
    ``launch_kwargs`` (a multi-node job's node) to ``launch.argv``."""
    return Execution(job, env_extra, launch_kwargs).run()

