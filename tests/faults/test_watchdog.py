"""A job that prints nothing and makes no progress for ``watchdog_minutes`` is stopped and failed."""
import time

import pytest

from tests.conftest import wait_for
from tests.faults.helpers import script, team_workspace
from trainhub.jobs.logs import read_lines
from trainhub.jobs.models import Job
from trainhub.jobs.services import job_submit
from workers.runner.config import SpecError, parse_spec


@pytest.mark.slow
@pytest.mark.db_agnostic
def test_a_silent_job_is_failed_by_the_watchdog_with_that_reason(start_worker, cpu_pool, user, tmp_path):
    team_workspace(tmp_path)
    start_worker("cpu", extra_env={"TRAINHUB_KILL_GRACE_SECONDS": "2"})
    job = job_submit(owner=user, data=script("silent.py", watchdog_minutes=0.05))  # 3 s
    wait_for(lambda: Job.objects.get(pk=job.pk).status == "running", timeout=60, message="the job to start")
    started = time.monotonic()
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=60, message="the watchdog to stop the job")
    assert done.status == "failed"
    assert "watchdog: no output and no progress for 0.05 min" in done.error
    assert time.monotonic() - started < 30
    assert any("hello, then silence" in line.text for line in read_lines(done.pk))


@pytest.mark.slow
@pytest.mark.db_agnostic
def test_a_job_that_keeps_printing_is_left_alone_by_the_watchdog(start_worker, cpu_pool, user, tmp_path):
    team_workspace(tmp_path)
    start_worker("cpu")
    job = job_submit(owner=user, data=script("ticker.py", "40", "0.2", watchdog_minutes=0.05))  # 8 s, 3 s watchdog
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=90, message="the job to finish")
    assert done.status == "succeeded", done.error


def test_watchdog_minutes_is_off_by_default_and_never_negative():
    assert parse_spec({}).watchdog_minutes == 0
    with pytest.raises(SpecError):
        parse_spec({"watchdog_minutes": -1})
