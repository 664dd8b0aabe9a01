"""A sandboxed job's /tmp is private and sized (``TRAINHUB_SANDBOX_TMP_BYTES``, 4 GiB by default): it is a
tmpfs, memory, so a job filling it would take the host's RAM from the jobs beside it. Past the size the
job's write fails with "No space left on device" and the job can go on (real worker, real script job)."""
from __future__ import annotations

import shutil

import pytest

from tests.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (apt-get install bubblewrap)")

FILLER = """
import errno, os
def fill(path, mib):
    try:
        with open(path, "wb") as out:
            for _ in range(mib):
                out.write(b"x" * 1024 * 1024)
        return "written"
    except OSError as exc:
        return errno.errorcode[exc.errno]
print("small:", fill("/tmp/small", 2), flush=True)
print("big:", fill("/tmp/big", 16), flush=True)
os.remove("/tmp/big")
print("after:", fill("/tmp/again", 2), flush=True)
"""
DIES_OF_IT = """
with open("/tmp/big", "wb") as out:
    for _ in range(16):
        out.write(b"x" * 1024 * 1024)
"""


def test_the_default_tmp_size_is_4_gib_and_zero_leaves_it_to_the_kernel(tmp_path, settings):
    from workers import sandbox

    plan = sandbox.Plan(run_dir=tmp_path, cwd=tmp_path, project=tmp_path, env={})
    assert settings.TRAINHUB_SANDBOX_TMP_BYTES == 4 * 1024 ** 3
    assert " ".join(sandbox.argv(plan)).count(f"--size {4 * 1024 ** 3} --tmpfs /tmp ") == 1
    settings.TRAINHUB_SANDBOX_TMP_BYTES = 0
    assert "--size" not in sandbox.argv(plan)


@needs_bwrap
def test_a_sandboxed_job_filling_its_tmp_past_the_size_gets_no_space_left_and_goes_on_or_dies_told_so(
        start_worker, cpu_pool, user, tmp_path):
    from trainhub.jobs import logs
    from trainhub.jobs.models import Job
    from trainhub.jobs.services import job_submit
    from trainhub.pools.models import Workspace

    assert cpu_pool.sandbox == "required"
    (tmp_path / "filler").mkdir()
    (tmp_path / "filler" / "fill.py").write_text(FILLER)
    (tmp_path / "filler" / "die.py").write_text(DIES_OF_IT)
    Workspace.objects.create(name="filler", path=str(tmp_path / "filler"))
    start_worker("cpu", extra_env={"TRAINHUB_SANDBOX_TMP_BYTES": str(8 * 1024 * 1024)})
    job = job_submit(owner=user, data={"mode": "script", "script": {"workspace": "filler", "entry": "fill.py"}})
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=120, message="the job filling /tmp to end")
    said = [line.text for line in logs.read_lines(job.pk, limit=500)]
    assert done.status == "succeeded", (done.error, said[-20:])
    assert "small: written" in said and "big: ENOSPC" in said and "after: written" in said, said[-20:]

    # a job that dies of its full /tmp is told that, not that its run directory's disk is full
    job = job_submit(owner=user, data={"mode": "script", "script": {"workspace": "filler", "entry": "die.py"}})
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=120, message="the job dying of its full /tmp to end")
    assert done.status == "failed"
    assert done.error.startswith("no space was left on a disk the job wrote to; its run directory's has "), done.error
    assert "a sandboxed job's /tmp holds 8 MiB" in done.error and "exited with code 1" in done.error, done.error
