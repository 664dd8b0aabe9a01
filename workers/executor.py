"""Runs one job attempt: starts it through a backend (``workers.backends``), feeds its output
to the job's log (``workers.logwriter``) and its events to metrics (``workers.events``), and
supervises it — renews the lease, enforces cancellation, timeout, watchdog, the run directory's
size cap (``workers.diskquota``) and worker shutdown, tells a full disk from other failures, and
returns the outcome.
"""
from __future__ import annotations

import errno
import logging
import shutil
import signal
import threading
import time
from pathlib import Path

from django.conf import settings
from django.utils.module_loading import import_string

from trainhub.runs.lifecycle import DB_ERRORS, Outcome, job_renew
from trainhub.jobs import rundir, specpaths
from trainhub.jobs.models import Job, Status
from trainhub.pools.models import WorkerPool, Workspace
from workers import backends, process
from workers.diskquota import DiskQuota
from workers.events import EventReader
from workers.logwriter import DbOutage, LogWriter
from workers.runner import fence, launch
from workers.runner.config import JobSpec, dump_yaml

log = logging.getLogger(__name__)
EVENTS_SECONDS = 1.0  # how often metrics and progress are read from events.jsonl
#: a followed job's output is stored every BATCH_SECONDS (one nobody follows, about once a second:
#: ``workers.logwriter``), or less often while this worker process supervises so
#: many jobs that their ticks together would pass TICKS_PER_SECOND (then every jobs / TICKS_PER_SECOND seconds:
#: 200 ms for 100 jobs). Each tick of each job is a wake-up, a poll and, when it printed, a database write and a
#: Redis entry: 100 jobs at 20 ticks a second took ~0.25 of a core in the worker alone (bench/log_fanout.py
#: --jobs 100; docs/BENCHMARKS.md, "Live logs").
BATCH_SECONDS = 0.05
TICKS_PER_SECOND = 500
_SUPERVISING: set = set()  # executions in ``supervise`` in this process (a set's add and discard hold the GIL)
READERS_SECONDS = 5.0  # after the processes exit, how long their last output may take to arrive
DISK_FULL_MARKERS = ("no space left on device", "errno 28", "file too large", "errno 27", "disk quota exceeded")
#: set when the worker is shutting down: running jobs stop and go back to the queue
SHUTDOWN = threading.Event()
Stop = tuple[str, str]  # (final status, reason)


def run_dir_for(job: Job) -> Path:
    return rundir.run_dir(job.pk)


def prepare(job: Job, spec: JobSpec, run_dir: Path, *, config_name: str, launch_kwargs: dict,
            env_extra: dict[str, str], pool: WorkerPool | None = None) -> backends.RunRequest:
    """Write the job's config into its run directory and say what a backend is to start:
    ``launch.argv`` (a gang's node: with ``launch_kwargs``) in the job's environment, sandboxed as
    ``pool`` (the job's, or a cross-site job's site's) says. The spec's paths are checked again here
    (a row written past the submit check fails before any path is opened), and only the places that
    hold them are shown to the sandbox, read-only."""
    pool = pool or job.pool
    places = specpaths.spec_places(spec, job.owner)
    run_dir.mkdir(parents=True, exist_ok=True)
    fence.claim(run_dir, job.attempt)  # a late run of an older attempt now writes nothing more here
    config_path = run_dir / config_name
    config_path.write_text(dump_yaml(spec), encoding="utf-8")
    workspace_dir = Path(Workspace.objects.get(name=spec.script.workspace).path) if spec.script else None
    return backends.RunRequest(
        argv=launch.argv(spec, config_path, run_dir, workspace_dir=workspace_dir, **launch_kwargs),
        env=process.child_env(spec, run_dir, workspace_dir, {
            **env_extra, "TRAINHUB_ATTEMPT": str(job.attempt),
            "TRAINHUB_GRACE_SECONDS": str(settings.TRAINHUB_GRACE_SECONDS)}),  # the guard's and the runner's grace
        cwd=launch.cwd(spec, run_dir, workspace_dir), run_dir=run_dir, job_id=job.pk, attempt=job.attempt,
        node_rank=launch_kwargs.get("node_rank", 0), sandbox=pool.sandbox,
        first_rank=launch_kwargs.get("node_rank", 0) * spec.resources.procs_per_node,
        network=pool.sandbox_network or launch_kwargs.get("nnodes", 1) > 1,  # a gang's rendezvous
        read_only=((workspace_dir,) if workspace_dir else ()) + places)


class Execution:
    def __init__(self, job: Job, env_extra: dict[str, str] | None = None, launch_kwargs: dict | None = None,
                 *, backend: str = "local"):
        self.job = job
        self.env_extra = dict(env_extra or {})  # from the scheduler, e.g. CUDA_VISIBLE_DEVICES of the GPU lease
        self.launch_kwargs = dict(launch_kwargs or {})  # a gang's node: nnodes, node_rank, rdzv_endpoint, rdzv_id
        self.spec = job.spec_model
        self.run_dir = run_dir_for(job)
        self.outage = DbOutage(job.pk)  # one view of the database for the log, the events and the lease
        self.log = LogWriter(job, self.outage)
        self.lines = self.log.lines  # (stream, [(rank, text), ...]) from any thread
        self.events = EventReader(job.pk, self.run_dir, self.outage)
        self.quota = DiskQuota(self.run_dir, settings.TRAINHUB_RUN_DIR_MAX_BYTES)
        self.backend = backends.get(backend)
        self.handle: backends.Handle | None = None
        self.exited = threading.Event()  # set once the job's processes have ended
        self.helpers: list[threading.Thread] = []  # threads feeding ``lines``, joined after the exit
        self.renewed = time.monotonic()

    # -- the log and the events ----------------------------------------------
    def system(self, text: str) -> None:
        self.log.system(text)

    def flush_lines(self, *, due: bool = False) -> bool:
        """Store what the job printed; False while the database is unavailable (see LogWriter). ``due``: the
        supervision tick's, which stores only when the log's pace says so (``LogWriter.due``)."""
        self._take_output()
        return self.log.flush_due() if due else self.log.flush()

    def _take_output(self) -> bool:
        """Move what fits in the log's pending buffer from the run to the log (the rest waits in
        the job's pipes: backpressure); whether anything was taken."""
        room = self.log.room()
        if self.handle is None or room == 0:
            return False
        items = self.handle.lines(room)
        for item in items:
            self.lines.put(item)
        return bool(items)

    def drain(self, seconds: float) -> bool:
        return self.log.drain(seconds)

    def pump_events(self, rounds: int = 1) -> None:
        if self.events.pump(rounds):
            self.log.activity = time.monotonic()  # progress counts as a sign of life for the watchdog

    @property
    def events_offset(self) -> int:
        return self.events.offset

    @property
    def db_retry_at(self) -> float:
        return self.outage.retry_at

    @db_retry_at.setter
    def db_retry_at(self, value: float) -> None:
        self.outage.retry_at = value

    # -- the processes -------------------------------------------------------
    def start(self) -> None:
        request = prepare(self.job, self.spec, self.run_dir, config_name="job.yaml",
                          launch_kwargs=self.launch_kwargs, env_extra=self.env_extra)
        self._seed_checkpoint()
        self.system(f"attempt {self.job.attempt}: starting {' '.join(request.argv)}")
        self.handle = self.backend.start(request)
        log.info("job %s: attempt %s runs as %s", self.job.pk, self.job.attempt, self.handle.describe())

    def _seed_checkpoint(self) -> None:
        """``checkpoint.start_from``: copy another job's checkpoint in, so the runner resumes from it.
        Only on the first attempt's start; a retry resumes from this job's own newer checkpoints."""
        source = self.spec.checkpoint.start_from
        target_root = self.run_dir / "checkpoints"
        if not source or (target_root.is_dir() and any(target_root.iterdir())):
            return
        origin = rundir.checkpoint_dir(source)  # the spec pattern allows job-N/checkpoints/step-M only
        shutil.copytree(origin, target_root / origin.name)
        self.system(f"starting from checkpoint {source}")

    def kill(self, why: str) -> None:
        """Ask the processes to stop, storing their output during the grace period; then they are killed."""
        assert self.handle is not None
        self.system(f"stopping: {why}")
        self.handle.cancel(settings.TRAINHUB_GRACE_SECONDS)
        while self.handle.poll() is None:
            self.flush_lines()
            time.sleep(0.1)

    def renew(self, now: float) -> Stop | None:
        """Renew the lease; a stop reason if the job must stop. A database error is not a lost
        lease, but a worker that cannot renew for longer than the lease must assume another
        worker took the job over (the lease is its fencing) and stop it."""
        try:
            status = job_renew(self.job)
        except DB_ERRORS as exc:
            self.outage.failed(exc)
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

    def _limit_reached(self, now: float, started: float) -> Stop | None:
        """Worker shutdown, timeout, or the watchdog: a reason to stop the job, or None."""
        if SHUTDOWN.is_set():
            return (Status.QUEUED, "the worker shut down; the job goes back to the queue")
        if now - started > self.spec.timeout_minutes * 60:
            return (Status.FAILED, f"timed out after {self.spec.timeout_minutes} min")
        watchdog = self.spec.watchdog_minutes * 60
        if watchdog and now - self.log.activity > watchdog:
            return (Status.FAILED, f"watchdog: no output and no progress for {self.spec.watchdog_minutes:g} min")
        over = self.quota.exceeded(now)
        if over:
            return (Status.FAILED, over)
        return None

    def supervise(self) -> Stop | None:
        """Until the processes exit: store their output every ``BATCH_SECONDS`` while somebody follows the
        log (less often beside many other jobs: ``TICKS_PER_SECOND``; about once a second while nobody
        does: ``LogWriter.flush_due``), read events, renew the lease, and stop them when a limit is
        reached. The stop reason, if any."""
        assert self.handle is not None
        started = time.monotonic()
        self.log.activity = self.renewed = started
        renew_every = _renew_every()
        next_renew, next_events = started + renew_every, started + EVENTS_SECONDS
        flushed = started
        _SUPERVISING.add(self)
        try:
            while self.handle.poll() is None:
                every = max(BATCH_SECONDS, len(_SUPERVISING) / TICKS_PER_SECOND)
                time.sleep(max(0.0, every - (time.monotonic() - flushed)))  # a flush every 50 ms, not 50 ms + flush
                flushed = time.monotonic()
                self.flush_lines(due=True)  # every tick while somebody follows the log, else about once a second
                now = time.monotonic()
                if now >= next_events:  # charts and progress follow within about a second
                    next_events = now + EVENTS_SECONDS
                    self.pump_events()
                stop = None
                if now >= next_renew:
                    next_renew = now + (renew_every if self.outage.down_since is None else min(renew_every, 1.0))
                    stop = self.renew(now)
                stop = stop or self._limit_reached(now, started)
                if stop:
                    self.kill(stop[1])
                    return stop
            return None
        finally:
            _SUPERVISING.discard(self)

    def collect(self) -> int:
        """After the exit: kill what is left, take the last output and events; the exit code."""
        assert self.handle is not None
        code = self.handle.poll()
        self.exited.set()
        self.handle.close(READERS_SECONDS)
        self.join_helpers(READERS_SECONDS)
        while self._take_output() and self.log.flush():  # all that is left, a pending buffer at a time
            pass
        self.flush_lines()  # also fills the log's tail with the last lines
        self.pump_events(rounds=16)  # what is left of the events file, up to 64 MB
        return code

    def join_helpers(self, seconds: float) -> None:
        """Wait up to ``seconds`` for each helper thread to end, renewing the lease meanwhile: an
        execution that waits after its processes exited (a cross-site leader for the other sites' last
        lines) still holds its job, or the reconcile would take it for a lost worker's. Stops waiting
        once the lease is lost (the outcome would be refused anyway)."""
        renew_every = _renew_every()
        for helper in self.helpers:
            deadline = time.monotonic() + seconds
            while helper.is_alive() and (left := deadline - time.monotonic()) > 0:
                helper.join(timeout=min(left, renew_every))
                now = time.monotonic()
                if helper.is_alive() and now - self.renewed >= renew_every:
                    stop = self.renew(now)
                    if stop and stop[0] == Status.FAILED:
                        return

    def run(self) -> Outcome:
        try:
            self.start()
        except Exception as exc:  # bad workspace, unwritable run dir, launcher missing
            return self._not_started(exc)
        stop = self.supervise()
        code = self.collect()
        outcome = self.outcome(stop, code)
        self.system(f"finished: {outcome.reason}")
        self.drain(max(30.0, settings.TRAINHUB_LEASE_SECONDS))
        self.pump_events()  # events read during an outage, now that the database is back
        return outcome

    def _not_started(self, exc: Exception) -> Outcome:
        log.exception("job %s could not start", self.job.pk)
        why = f"could not start: {exc}"
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            why = f"could not start: the disk of the run directory {self.run_dir.parent} is full ({exc})"
        self.system(why)
        self.drain(60)
        return Outcome(Status.FAILED, None, why)

    def outcome(self, stop: Stop | None, code: int) -> Outcome:
        if stop:
            return Outcome(stop[0], code, stop[1])
        over = self.quota.exceeded()  # written since the last check, just before the end
        if over:
            return Outcome(Status.FAILED, code, over)
        if code == 0:
            return Outcome(Status.SUCCEEDED, 0, "exited with code 0")
        full = self.disk_full()
        if full:
            return Outcome(Status.FAILED, code, f"{full}; {describe_exit(code)}")
        return Outcome(Status.FAILED, code, describe_exit(code))

    def disk_full(self) -> str:
        """Which disk the job failed of, or "": the run directory's when less than 64 KiB is left on it,
        else, when its last lines say no space was left, the facts to tell which (its sandboxed /tmp?)."""
        said = any(marker in line.lower() for line in self.log.tail for marker in DISK_FULL_MARKERS)
        try:
            free = shutil.disk_usage(self.run_dir).free
        except OSError:
            free = None
        if (free is None and said) or (free is not None and free < 64 * 1024):
            return f"the disk of the run directory {self.run_dir.parent} is full (no space left on device)"
        if said:
            return (f"no space was left on a disk the job wrote to; its run directory's has {free // 1024 ** 2} MiB "
                    f"free, a sandboxed job's /tmp holds {settings.TRAINHUB_SANDBOX_TMP_BYTES // 1024 ** 2} MiB "
                    "(TRAINHUB_SANDBOX_TMP_BYTES)")
        return ""


def _renew_every() -> float:
    """Seconds between lease renewals: three tries within a lease."""
    return max(1.0, settings.TRAINHUB_LEASE_SECONDS / 3)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def execute(job: Job, env_extra: dict[str, str] | None = None, launch_kwargs: dict | None = None) -> Outcome:
    """Run one attempt; ``env_extra`` is added to the launched command's environment and
    ``launch_kwargs`` (a multi-node job's node) to ``launch.argv``. The pool's backend picks
    the supervision: ``EXECUTIONS``."""
    return import_string(EXECUTIONS[job.pool.backend])(job, env_extra, launch_kwargs).run()


#: a pool's backend → its Execution (dotted paths: slurm_execution builds on this module)
EXECUTIONS = {"local": "workers.executor.Execution", "slurm": "workers.slurm_execution.SlurmExecution"}
