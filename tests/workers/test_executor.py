"""The executor over a scripted backend: what a user sees of a job (its log, its final status
and reason) does not depend on where the job's processes run. No process is started here;
the real processes are in tests/e2e and tests/faults."""
from __future__ import annotations

import pytest

from trainhub.jobs.logs import read_lines
from trainhub.jobs.models import Job, Status
from trainhub.jobs.services import job_cancel, job_submit
from workers import backends, executor, process
from workers.executor import Execution


class ScriptedHandle:
    """Prints ``output`` (a batch per poll), then exits with ``code``; or, with ``code`` None,
    runs until cancelled and then exits with -15 (SIGTERM)."""

    def __init__(self, run: backends.RunRequest, output: list[tuple[str, str]], code: int | None):
        self.run, self.output, self.code = run, list(output), code
        self.pending: backends.Output = []
        self.cancelled_with: float | None = None
        self.closed = False

    def poll(self) -> int | None:
        if self.output:
            stream, text = self.output.pop(0)
            self.pending.append((stream, [(0, text)]))
            return None
        if self.cancelled_with is not None:
            return -15
        return self.code

    def cancel(self, grace: float) -> None:
        self.cancelled_with = grace

    def lines(self, max_lines: int | None = None) -> backends.Output:
        out, self.pending = self.pending, []
        return out

    def close(self, timeout: float) -> None:
        self.closed = True

    def describe(self) -> str:
        return "a scripted run"


@pytest.fixture
def scripted(monkeypatch):
    """Registers the ``scripted`` backend; set ``.output`` and ``.code`` before the run."""

    class ScriptedBackend:
        output: list[tuple[str, str]] = []
        code: int | None = 0
        handles: list[ScriptedHandle] = []

        def start(self, run: backends.RunRequest) -> ScriptedHandle:
            handle = ScriptedHandle(run, self.output, self.code)
            self.handles.append(handle)
            return handle

    monkeypatch.setitem(backends.BACKENDS, "scripted", ScriptedBackend)
    return ScriptedBackend


@pytest.fixture
def job(cpu_pool, user, settings, tmp_path):
    settings.TRAINHUB_RUNS_DIR = tmp_path / "runs"
    job = job_submit(owner=user, data={"data": {"dataset": "iris"}, "model": {"name": "logreg"}})
    Job.objects.filter(pk=job.pk).update(status=Status.RUNNING, lease_token=1)
    job.refresh_from_db()
    return job


def texts(job: Job) -> list[str]:
    return [line.text for line in read_lines(job.pk)]


def test_a_job_that_exits_cleanly_succeeds_with_its_output_in_the_log_in_order(job, scripted):
    scripted.output = [("o", "hello"), ("e", "a warning"), ("o", "bye")]
    outcome = Execution(job, backend="scripted").run()
    assert (outcome.status, outcome.exit_code, outcome.reason) == (Status.SUCCEEDED, 0, "exited with code 0")
    lines = texts(job)
    assert lines[0].startswith("attempt 1: starting ") and lines[1:] == ["hello", "a warning", "bye",
                                                                          "finished: exited with code 0"]
    assert scripted.handles[0].closed


def test_a_failing_job_says_how_it_exited(job, scripted):
    scripted.code = -9
    outcome = Execution(job, backend="scripted").run()
    assert (outcome.status, outcome.reason) == (Status.FAILED, "killed by SIGKILL")


def test_a_job_that_said_a_disk_is_full_fails_saying_so_without_blaming_its_run_directorys_disk(job, scripted):
    scripted.output, scripted.code = [("e", "OSError: [Errno 28] No space left on device")], 1
    outcome = Execution(job, backend="scripted").run()
    assert outcome.status == Status.FAILED
    assert outcome.reason.startswith("no space was left on a disk the job wrote to; its run directory's has ")
    assert outcome.reason.endswith("(TRAINHUB_SANDBOX_TMP_BYTES); exited with code 1")


def test_a_cancelled_job_is_asked_to_stop_with_the_grace_and_ends_cancelled(job, scripted, settings):
    settings.TRAINHUB_LEASE_SECONDS, settings.TRAINHUB_GRACE_SECONDS = 3, 7  # renews every second
    scripted.code = None
    job_cancel(Job.objects.get(pk=job.pk))
    outcome = Execution(job, backend="scripted").run()
    assert (outcome.status, outcome.reason) == (Status.CANCELLED, "cancelled")
    assert scripted.handles[0].cancelled_with == 7
    assert "stopping: cancelled" in texts(job)


def test_a_worker_shutting_down_stops_the_job_and_sends_it_back_to_the_queue(job, scripted, monkeypatch):
    monkeypatch.setattr(executor, "SHUTDOWN", type(executor.SHUTDOWN)())
    executor.SHUTDOWN.set()
    scripted.code = None
    outcome = Execution(job, backend="scripted").run()
    assert outcome.status == Status.QUEUED and "the worker shut down" in outcome.reason


def test_the_backend_gets_the_jobs_command_and_an_environment_without_the_dashboards_secrets(job, scripted,
                                                                                               monkeypatch):
    for name in process.SECRETS:
        monkeypatch.setenv(name, "secret")
    Execution(job, {"CUDA_VISIBLE_DEVICES": "0"}, backend="scripted").run()
    run = scripted.handles[0].run
    assert not set(process.SECRETS) & set(run.env) and run.env["CUDA_VISIBLE_DEVICES"] == "0"
    assert (run.job_id, run.attempt, run.node_rank) == (job.pk, 1, 0)
    assert (run.run_dir / "job.yaml").is_file() and str(run.run_dir / "job.yaml") in run.argv


def test_a_job_that_cannot_start_fails_saying_why(job, scripted, monkeypatch):
    def broken(self, run):
        raise FileNotFoundError(2, "No such file or directory", "torchrun")

    monkeypatch.setattr(scripted, "start", broken)
    outcome = Execution(job, backend="scripted").run()
    assert outcome.status == Status.FAILED and outcome.reason.startswith("could not start: ")
    assert "torchrun" in texts(job)[-1]
