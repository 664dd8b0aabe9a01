"""A worker frozen past its lease (SIGSTOP, as a paused VM or a swapped-out host) while another worker
recovers and finishes its job: when it wakes, it and its job's processes must change nothing."""
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import job_processes, wait_for, wait_for_checkpoints
from trainhub.jobs.models import Job, JobEvent, LogLine, Metric
from trainhub.jobs.services import job_submit

pytestmark = pytest.mark.slow
FAST_LEASES = {"TRAINHUB_LEASE_SECONDS": "5", "TRAINHUB_HEARTBEAT_SECONDS": "1", "TRAINHUB_GUARD_GRACE_SECONDS": "1",
               "TRAINHUB_KILL_GRACE_SECONDS": "3"}


def frozen_tree(worker_pid: int, job_id: int) -> list[psutil.Process]:
    """The worker with its children, and every process of the job (its own session: not the worker's children)."""
    worker = psutil.Process(worker_pid)
    procs = {p.pid: p for p in [worker, *worker.children(recursive=True)]}
    procs.update((p.pid, p) for p in job_processes(job_id))
    return list(procs.values())


def snapshot(job: Job, run_dir: Path) -> dict:
    # A run frozen while it wrote a checkpoint finishes that write into its temporary directory
    # (checkpoints/.tmp-step-N-a1) when it wakes, then meets the fence and removes it: resume reads only
    # the renamed step-N directories, and those it must not touch. The temporary ones are left out.
    files = {str(p.relative_to(run_dir)): p.stat().st_mtime_ns
             for p in run_dir.rglob("*") if p.is_file() and "logs" not in p.parts
             and not any(part.startswith(".tmp-step-") for part in p.parts)}
    job.refresh_from_db()
    return {"status": (job.status, job.attempt, job.error, job.finished_at),
            "events": list(JobEvent.objects.filter(job=job).values_list("pk", flat=True)),
            "lines": LogLine.objects.filter(job=job).count(),
            "metrics": Metric.objects.filter(job=job).count(),
            "checkpoints": {k: v for k, v in files.items() if k.startswith("checkpoints")},
            "files": files}


def test_a_worker_that_wakes_after_its_job_was_recovered_changes_nothing(start_worker, cpu_pool, user, live_settings):
    first = start_worker("cpu", name="frozen@test", extra_env=FAST_LEASES)
    job = job_submit(owner=user, data={
        "name": "fenced", "max_restarts": 1, "data": {"dataset": "synthetic", "samples": 20000},
        "train": {"epochs": 3}, "checkpoint": {"every_steps": 20, "keep_last": 100}})
    wait_for_checkpoints(live_settings.TRAINHUB_RUNS_DIR, job.pk, count=2)

    frozen = frozen_tree(first.proc.pid, job.pk)
    assert len(frozen) >= 3, "the worker, the job's guard and its runner"
    for proc in frozen:
        proc.send_signal(signal.SIGSTOP)
    try:
        start_worker("cpu", name="rescuer@test", extra_env=FAST_LEASES)
        done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                        timeout=240, message="the job to be recovered and finished by the other worker")
        assert done.status == "succeeded", done.error
        assert done.attempt == 2 and done.worker.hostname == "rescuer@test"
        run_dir = Path(live_settings.TRAINHUB_RUNS_DIR) / f"job-{job.pk}"
        before = snapshot(job, run_dir)  # what the rescuer left, taken while the late worker is still frozen
        assert before["checkpoints"], "the rescuer wrote checkpoints"
    finally:
        for proc in frozen:
            if proc.is_running():
                proc.send_signal(signal.SIGCONT)

    # The late worker gets a whole lease period and its kill grace to do its worst.
    time.sleep(5 + 3 + 4)
    after = snapshot(job, run_dir)
    assert after["status"] == before["status"], "the late worker changed the job's status"
    assert after["events"] == before["events"], "the late worker wrote history"
    assert after["lines"] == before["lines"], "the late worker wrote log lines after the job had finished"
    assert after["metrics"] == before["metrics"], "the late worker's run stored metrics"
    assert after["checkpoints"] == before["checkpoints"], "the late run wrote or removed checkpoints"
    assert after["files"] == before["files"], "the late run changed files in the run directory"
    wait_for(lambda: not [p for p in frozen[1:] if p.is_running() and p.status() != psutil.STATUS_ZOMBIE],
             timeout=20, message="the late worker to stop its job's processes")
    assert first.proc.poll() is None, "the late worker itself keeps serving"
