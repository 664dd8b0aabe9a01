"""One job cannot fill the disk of the runs root: past ``TRAINHUB_RUN_DIR_MAX_BYTES`` its worker stops it
and it fails saying "run directory exceeded …" (real worker, real jobs)."""
from __future__ import annotations

import time

import pytest

from tests.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]

FILLER = """
import os, sys, time
with open(os.path.join(os.environ["TRAINHUB_RUN_DIR"], "blob.bin"), "wb") as out:
    for _ in range(3):
        out.write(b"x" * 1_000_000)
        out.flush()
print("wrote 3 MB", flush=True)
if sys.argv[1:] == ["stay"]:
    time.sleep(120)
"""


def test_a_job_writing_past_the_run_directory_cap_is_stopped_and_fails_saying_so(start_worker, cpu_pool, user,
                                                                                 tmp_path):
    from trainhub.jobs import logs
    from trainhub.jobs.models import Job
    from trainhub.jobs.services import job_submit
    from trainhub.pools.models import Workspace

    (tmp_path / "filler").mkdir()
    (tmp_path / "filler" / "fill.py").write_text(FILLER)
    Workspace.objects.create(name="filler", path=str(tmp_path / "filler"))
    start_worker("cpu", extra_env={"TRAINHUB_RUN_DIR_MAX_BYTES": "1000000"})
    script = {"workspace": "filler", "entry": "fill.py"}
    staying = job_submit(owner=user, data={"mode": "script", "script": {**script, "args": ["stay"]}})
    quick = job_submit(owner=user, data={"mode": "script", "script": script})  # exits 0 between two checks
    started = time.monotonic()
    done = wait_for(lambda: Job.objects.filter(pk=staying.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=120, message="the filling job to be stopped")
    assert time.monotonic() - started < 100  # stopped, not left to its two minutes
    expected = ("run directory exceeded 1.0 MB (TRAINHUB_RUN_DIR_MAX_BYTES): it holds more than 1.0 MB; keep fewer "
                "checkpoints (checkpoint.keep_last) or write less, or ask an administrator to raise the cap")
    assert done.status == "failed" and done.error.startswith("run directory exceeded 1.0 MB"), done.error
    assert done.error.split(": it holds more than ")[0] == expected.split(": it holds more than ")[0]
    texts = [line.text for line in logs.read_lines(staying.pk, limit=100)]
    assert "wrote 3 MB" in texts and any(t.startswith("finished: run directory exceeded 1.0 MB") for t in texts)

    ended = wait_for(lambda: Job.objects.filter(pk=quick.pk, status__in=["succeeded", "failed"]).first(),
                     timeout=120, message="the quick filling job to end")
    assert ended.status == "failed" and ended.error.startswith("run directory exceeded 1.0 MB"), ended.error
