"""A job that runs past timeout_minutes is stopped, whole process tree included, and fails saying so."""
import psutil
import pytest

from tests.conftest import wait_for
from trainhub.jobs.models import Job
from trainhub.jobs.rundir import run_dir
from trainhub.pools.models import Workspace

pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]

BUSY = "import time\nwhile True:\n    print('still going', flush=True)\n    time.sleep(1)\n"


def test_a_job_past_its_timeout_is_killed_and_fails_with_the_reason(start_worker, cpu_pool, user_client, tmp_path):
    (tmp_path / "busy.py").write_text(BUSY)
    Workspace.objects.create(name="busy", path=str(tmp_path))
    start_worker("cpu", extra_env={"TRAINHUB_KILL_GRACE_SECONDS": "2"})
    job_id = user_client.post("/api/jobs", {"name": "forever", "mode": "script", "timeout_minutes": 1,
                                            "resources": {"procs_per_node": 2},
                                            "script": {"workspace": "busy", "entry": "busy.py",
                                                       "launcher": "torchrun"}},
                              content_type="application/json").json()["id"]
    job = wait_for(lambda: Job.objects.filter(pk=job_id, status__in=["succeeded", "failed"]).first(),
                   timeout=150, message="the timeout to stop the job")
    assert job.status == "failed" and job.error == "timed out after 1 min"
    assert 60 <= (job.finished_at - job.started_at).total_seconds() < 90
    # this test's run directory (torchrun's log dir, the sandbox's binds) and the ranks' script: whole paths, as
    # "job-N" alone also names other tests' jobs (their own databases count from 1) running beside this one
    marks = (str(run_dir(job_id)), str(tmp_path / "busy.py"))
    assert not [p for p in psutil.process_iter(["cmdline"]) if any(m in " ".join(p.info["cmdline"] or []) for m in marks)]
