"""Runs one job attempt: the launcher as a subprocess in its own process group, every
rank's output pumped into the log pipeline, events turned into progress and metrics,
the lease renewed, cancellation and timeout enforced.
"""
from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path
from subprocess import PIPE, Popen

from django.conf import settings

from trainhub.jobs import logs
from trainhub.jobs.lifecycle import Outcome, job_renew
from trainhub.jobs.models import Job, Status
from trainhub.pools.models import Workspace
from workers import launch
from workers.runner.config import dump_yaml, parse_spec
from workers.runner.report import read_events

log = logging.getLogger(__name__)
MAX_LINE = 16_384
BATCH_SECONDS = 0.05
#: set when the worker is shutting down: running jobs stop and go back to the queue
SHUTDOWN = threading.Event()


def run_dir_for(job: Job) -> Path:
    return Path(settings.TRAINHUB_RUNS_DIR) / f"job-{job.pk}"


def _split_line(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").rstrip("\n")
    if "\r" in text:  # a progress bar rewrote the line: keep its latest state
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    return text[:MAX_LINE]


def _pump(pipe, stream: str, out: queue.Queue) -> None:
    for raw in iter(pipe.readline, b""):
        text = _split_line(raw)
        rank = 0
        match = launch.RANK_LINE.match(text)
        if match:
            rank, text = int(match.group(1)), text[match.end():]
        out.put((rank, stream, text))
    pipe.close()


class Execution:
    def __init__(self, job: Job):
        self.job = job
        self.spec = parse_spec(job.spec)
        self.run_dir = run_dir_for(job)
        self.seq = logs.next_seq(job.pk)
        self.lines: queue.Queue = queue.Queue()
        self.events_offset = 0
        self.proc: Popen | None = None
        self.readers: list[threading.Thread] = []

    # -- output -------------------------------------------------------------
    def system(self, text: str) -> None:
        self.lines.put((0, "s", text))

    def flush_lines(self) -> None:
        batch = []
        while True:
            try:
                rank, stream, text = self.lines.get_nowait()
            except queue.Empty:
                break
            batch.append(logs.Line(self.seq, rank, stream, text))
            self.seq += 1
        logs.append_lines(self.job.pk, batch)

    def pump_events(self) -> None:
        events, self.events_offset = read_events(self.run_dir, self.events_offset)
        progress = None
        for event in events:
            kind = event.get("type")
            if kind == "metrics" and isinstance(event.get("values"), dict):
                logs.record_metrics(self.job.pk, int(event.get("step", 0)), event["values"])
            elif kind in ("progress", "start") and "total_steps" in event:
                progress = (int(event.get("step", 0)), int(event["total_steps"]))
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
        argv = launch.argv(self.spec, config_path, self.run_dir, workspace_dir=workspace_dir)
        env = launch.env(self.spec, self.run_dir, workspace_dir=workspace_dir)
        for name in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "TRAINHUB_SECRET_KEY", "REDIS_URL"):
            env.pop(name, None)  # training code gets no access to the dashboard's secrets
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
        stop_reason: tuple[str, str] | None = None
        while self.proc.poll() is None:
            time.sleep(BATCH_SECONDS)
            self.flush_lines()
            now = time.monotonic()
            if now >= next_renew:
                next_renew = now + renew_every
                self.pump_events()
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


def execute(job: Job) -> Outcome:
    return Execution(job).run()

