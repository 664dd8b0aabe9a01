"""What Slurm says about a job reaches the handle: a pending reason, an operator's scancel,
a job that ignores SIGTERM being killed after the grace."""
from __future__ import annotations

import time

import psutil
import pytest

from tests.slurm.conftest import operator_cancel_reason
from tests.slurm.test_backend import finish, options, request
from workers import slurm_cli
from workers.backends import get

pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]
SLEEP = "import time; print('up', flush=True); time.sleep(600)"


def wait_for(check, seconds: float = 60):
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)
    return value


def test_a_job_waiting_for_a_full_partition_shows_slurms_reason_and_cancels_at_once(
        slurm_cluster, live_settings, tmp_path):
    backend = get("slurm", options=options(slurm_cluster, live_settings, nodes=2, procs_per_node=2))
    filler = backend.start(request(tmp_path / "a", SLEEP, job_id=11))
    wait_for(lambda: filler.refresh(force=True).state == "RUNNING")
    waiting = backend.start(request(tmp_path / "b", SLEEP, job_id=12))
    assert wait_for(lambda: waiting.refresh(force=True) and waiting.pending_reason()) in ("Resources", "Priority")
    assert waiting.describe() == f"slurm job {waiting.job_id} (pending)"
    started = time.monotonic()
    waiting.cancel(grace=30)
    assert finish(waiting)[0] is not None and time.monotonic() - started < 15  # no grace for a job that never ran
    filler.cancel(grace=1)
    finish(filler)


def test_an_operators_scancel_is_noticed_as_not_ours(slurm_cluster, slurm_cluster_handle, live_settings, tmp_path):
    handle = get("slurm", options=options(slurm_cluster, live_settings)).start(request(tmp_path, SLEEP))
    wait_for(lambda: handle.refresh(force=True).state == "RUNNING")
    slurm_cli.run(["scancel", handle.job_id], handle.env)
    code, _ = finish(handle)
    assert code is not None and handle.state.state == "CANCELLED"
    assert handle.reason() == operator_cancel_reason(slurm_cluster_handle)


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(slurm_cluster, live_settings, tmp_path):
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
            "time.sleep(600)")
    handle = get("slurm", options=options(slurm_cluster, live_settings, nodes=2, grace_seconds=2)).start(
        request(tmp_path, code, "marker-ignores-term"))
    seen = []
    wait_for(lambda: seen.extend(handle.lines()) or sum(len(items) for _s, items in seen) >= 2)
    handle.cancel(grace=2)
    assert finish(handle)[0] is not None
    time.sleep(1)
    assert not [p for p in psutil.process_iter(["cmdline"]) if "marker-ignores-term" in (p.info["cmdline"] or [])]
