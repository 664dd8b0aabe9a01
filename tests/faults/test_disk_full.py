"""Disk full in the run directory: that job fails saying so; a job running beside it goes on."""
import subprocess

import pytest

from tests.conftest import wait_for
from tests.faults.helpers import script, team_workspace
from trainhub.jobs.models import Job
from trainhub.jobs.services import job_submit

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs for the run directories (needs root and mount; skipped otherwise)."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip() or mounted.returncode}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_job_that_fills_its_disk_fails_saying_so_and_the_job_beside_it_succeeds(start_worker, cpu_pool, user,
                                                                                   tmp_path, small_disk):
    team_workspace(tmp_path)
    start_worker("cpu", slots=2, extra_env={"TRAINHUB_RUNS_DIR": str(small_disk)})
    steady = job_submit(owner=user, data=script("ticker.py", "40", "0.2"))
    wait_for(lambda: Job.objects.get(pk=steady.pk).log_lines > 2, timeout=60, message="the steady job to print")
    filler = job_submit(owner=user, data=script("filler.py", "8"))
    failed = wait_for(lambda: Job.objects.filter(pk=filler.pk, status__in=["succeeded", "failed"]).first(),
                      timeout=60, message="the filler to end")
    assert failed.status == "failed"
    assert "disk of the run directory" in failed.error and "is full" in failed.error
    done = wait_for(lambda: Job.objects.filter(pk=steady.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=60, message="the steady job to end")
    assert done.status == "succeeded", done.error
