"""Runs one job attempt: the launcher as a subprocess in its own process group, every
rank's output pumped into the log pipeline, events turned into progress and metrics,
the lease renewed, cancellation and timeout enforced.
"""
from __future__ import annotations

import logging
import math
import os
import queue
import select
import signal
import sys
import threading
import time
from pathlib import Path
from subprocess import PIPE, Popen

from django.conf import settings

from trainhub.jobs import logs, retention
from trainhub.jobs.lifecycle import Outcome, job_renew
from trainhub.jobs.models import Job, Status
from trainhub.pools.models import Workspace
from workers import launch
from workers.runner.config import dump_yaml, parse_spec
from workers.runner.report import read_events

log = logging.getLogger(__name__)
MAX_LINE = 16_384  # characters; longer lines are cut with a marker
MAX_LINE_BYTES = MAX_LINE * 4
PARTIAL_SECONDS = 1.0  # how often an unfinished progress-bar line shows its latest state
EVENTS_SECONDS = 1.0  # how often metrics and progress are read from events.jsonl
BATCH_SECONDS = 0.05
FLUSH_MAX = 20_000
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


class Execution:
    def __init__(self, job: Job, env_extra: dict[str, str] | None = None, launch_kwargs: dict | None = None):
        self.job = job
        self.env_extra = dict(env_extra or {})  # from the scheduler, e.g. CUDA_VISIBLE_DEVICES of the GPU lease
        self.launch_kwargs = dict(launch_kwargs or {})  # a gang's node: nnodes, node_rank, rdzv_endpoint, rdzv_id
        self.spec = parse_spec(job.spec)
        self.run_dir = run_dir_for(job)
        self.seq = logs.next_seq(job.pk)
        # lines kept per job (0: all): the pool's setting, else TRAINHUB_LOG_RETENTION; cut while it runs
        self.retention = getattr(job.pool, "log_retention_lines", 0) or retention.limit_for(job.pool.name)
        if 0 < self.retention < retention.MINIMUM:
            self.retention = retention.MINIMUM
        self.next_cut = self.seq + max(1_000, self.retention // 10)
        self.lines: queue.Queue = queue.Queue()
        self.events_offset = 0
        self.proc: Popen | None = None
        self.readers: list[threading.Thread] = []

    # -- output -------------------------------------------------------------
    def system(self, text: str) -> None:
        self.lines.put(("s", [(0, text)]))

    def flush_lines(self) -> None:
        batch = []
        while True:
            try:
                stream, items = self.lines.get_nowait()
            except queue.Empty:
                break
            seq = self.seq
            batch.extend([(seq + i, rank, stream, text) for i, (rank, text) in enumerate(items)])  # Line-shaped
            self.seq += len(items)
        for start in range(0, len(batch), FLUSH_MAX):  # bounded statements, even after a burst
            logs.append_lines(self.job.pk, batch[start:start + FLUSH_MAX])
        if self.retention and self.seq >= self.next_cut:
            retention.enforce(self.job.pk, self.seq, self.retention, self.job.pool.name)
            self.next_cut = self.seq + max(1_000, self.retention // 10)

    def pump_events(self) -> None:
        events, self.events_offset = read_events(self.run_dir, self.events_offset)
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
        for pipe, stream in ((self.proc.stdout, "o"), (self.proc.stderr, "e")):
            reader = threading.Thread(target=_pump, args=(pipe, stream, self.lines), daemon=True)
            reader.start()
            self.readers.append(reader)

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

    def run(self) -> Outcome:
        try:
            self.start()
        except Exception as exc:  # bad workspace, unwritable run dir, launcher missing
            log.exception("job %s could not start", self.job.pk)
            self.system(f"could not start: {exc}")
            self.flush_lines()
            return Outcome(Status.FAILED, None, f"could not start: {exc}")
        timeout = self.spec.timeout_minutes * 60
        started = time.monotonic()
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
                next_renew = now + renew_every
                status = job_renew(self.job)
                if status is None:
                    stop_reason = (Status.FAILED, "this worker lost the job's lease")
                elif status == Status.CANCELLING:
                    stop_reason = (Status.CANCELLED, "cancelled")
            if stop_reason is None and SHUTDOWN.is_set():
                stop_reason = (Status.QUEUED, "the worker shut down; the job goes back to the queue")
            if stop_reason is None and now - started > timeout:
                stop_reason = (Status.FAILED, f"timed out after {self.spec.timeout_minutes} min")
            if stop_reason:
                self.kill(stop_reason[1])
                break
        code = self.proc.wait()
        _signal_group(self.proc.pid, signal.SIGKILL)  # no rank or data-loader worker outlives the job
        for reader in self.readers:
            reader.join(timeout=5)
        self.pump_events()
        if stop_reason:
            outcome = Outcome(stop_reason[0], code, stop_reason[1])
        elif code == 0:
            outcome = Outcome(Status.SUCCEEDED, 0, "exited with code 0")
        else:
            outcome = Outcome(Status.FAILED, code, _describe_exit(code))
        self.system(f"finished: {outcome.reason}")
        self.flush_lines()
        return outcome


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

