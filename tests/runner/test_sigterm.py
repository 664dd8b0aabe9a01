"""Cancelling: SIGTERM to the job's process group checkpoints, stops every rank, exits non-zero."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil
import pytest

from tests.runner.conftest import command, run_job
from workers.runner.report import read_events

pytestmark = pytest.mark.slow

LONG = {
    "name": "long", "mode": "ddp",
    "resources": {"procs_per_node": 2},
    "data": {"dataset": "synthetic", "samples": 20000, "batch_size": 16},
    "model": {"name": "mlp", "hidden": 32},
    "train": {"epochs": 50, "log_every_steps": 20},
    "checkpoint": {"every_steps": 100000},
}


def _processes_of(run_dir) -> list[psutil.Process]:
    """Every live process of the job (torchrun starts each rank in a session of its own, so
    they are found by the run directory on their command line)."""
    alive = []
    for proc in psutil.process_iter():
        try:
            if str(run_dir) in " ".join(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.Error:
            continue
    return alive


def _start(tmp_path):
    argv, env, cwd, run_dir = command(LONG, tmp_path)
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    for line in proc.stdout:
        if "step 40/" in line:
            break
    return proc, run_dir


def _wait_gone(run_dir, seconds: float = 20) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while (left := _processes_of(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _cleanup(proc, run_dir) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    for left in _processes_of(run_dir):
        left.kill()


def test_sigterm_to_the_process_group_checkpoints_and_leaves_no_process(tmp_path):
    proc, run_dir = _start(tmp_path)
    try:
        assert len(_processes_of(run_dir)) == 3, "torchrun and two ranks are running"
        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        output = proc.stdout.read()
        code = proc.wait(timeout=60)
        took = time.monotonic() - started
        left = _wait_gone(run_dir)
    finally:
        _cleanup(proc, run_dir)

    assert code != 0
    assert took < 20
    assert "[rank0]: received SIGTERM" in output and "[rank1]: received SIGTERM" in output
    assert left == []
    events = read_events(run_dir)[0]
    assert events[-1]["type"] == "end" and events[-1]["status"] == "interrupted"
    [saved] = [e for e in events if e["type"] == "checkpoint"]
    assert saved["step"] >= 40
    assert (run_dir / saved["path"] / "state.pt").exists()

    # the job's retry picks the checkpoint up
    retry = dict(LONG, train={**LONG["train"], "max_steps": saved["step"] + 5})
    result = run_job(retry, tmp_path / "retry", run_dir=run_dir)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.of_type("start")[-1]["resumed_from"] == saved["step"]


def test_ranks_do_not_outlive_a_launcher_killed_outright(tmp_path):
    proc, run_dir = _start(tmp_path)
    try:
        proc.kill()  # SIGKILL to torchrun alone: it cannot forward anything
        proc.wait(timeout=10)
        left = _wait_gone(run_dir)
    finally:
        _cleanup(proc, run_dir)

    assert left == []
    events = read_events(run_dir)[0]
    assert events[-1]["type"] == "end" and events[-1]["status"] == "interrupted"
