"""How often a running job's output is stored: every 50 ms while its worker process supervises few jobs, and
less often while it supervises many, so that their wake-ups, polls and writes together stay bounded
(``executor.TICKS_PER_SECOND``): 100 jobs ticking 20 times a second took a quarter of a core in the
worker alone (docs/BENCHMARKS.md, "Live logs"). A real job prints a line every 10 ms; the stored rows'
times say how many writes the log took."""
import statistics

import pytest

from tests.faults.helpers import assert_ticks_complete, script, team_workspace
from trainhub.jobs.models import Job, LogLine, Status
from trainhub.jobs.services import job_submit
from workers import executor
from workers.executor import Execution

LINES, DELAY = 150, 0.01  # ~1.5 s of printing


def stored_gaps(user, tmp_path, settings) -> list[float]:
    """Run the ticker job to the end; the seconds between one write of its lines and the next (the last
    write, after the job exited, left out: it comes when the job ends, not on a tick)."""
    settings.TRAINHUB_RUNS_DIR = tmp_path / "runs"
    team_workspace(tmp_path)
    job = job_submit(owner=user, data=script("ticker.py", str(LINES), str(DELAY)))
    Job.objects.filter(pk=job.pk).update(status=Status.RUNNING, lease_token=1)
    job.refresh_from_db()
    outcome = Execution(job).run()
    assert outcome.status == Status.SUCCEEDED, outcome.reason
    assert_ticks_complete(job.pk, LINES)  # however often it is stored, every line once, in order
    writes = sorted(set(LogLine.objects.filter(job=job, text__startswith="tick ").values_list("at", flat=True)))
    return [(b - a).total_seconds() for a, b in zip(writes, writes[1:-1])]


@pytest.fixture
def others(monkeypatch):
    """Stand-ins for the other jobs this worker process supervises (only their number counts)."""
    supervising = set()
    monkeypatch.setattr(executor, "_SUPERVISING", supervising)
    return supervising


def test_a_job_alone_is_stored_every_50_ms(cpu_pool, user, settings, tmp_path, others):
    gaps = stored_gaps(user, tmp_path, settings)
    assert len(gaps) >= 5 and statistics.median(gaps) < 0.25, gaps  # ~0.05 s (a loaded machine stretches it)


def test_beside_many_jobs_a_job_is_stored_less_often_and_still_whole(cpu_pool, user, settings, tmp_path, others):
    others.update(object() for _ in range(199))  # with this job, 200: one write per 400 ms
    gaps = stored_gaps(user, tmp_path, settings)
    assert gaps and min(gaps) >= 0.35, gaps  # never sooner than a tick; 0.05 s for a job alone
