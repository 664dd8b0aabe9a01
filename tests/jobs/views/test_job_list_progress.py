"""The job list shows a running job's progress and time left, and refreshes them while it polls."""
from datetime import timedelta

from django.utils import timezone

from trainhub.jobs.models import Job
from trainhub.jobs.templatetags.progress import eta, eta_seconds


def _job(user, pool, **fields):
    return Job.objects.create(owner=user, name="eta", mode="centralized", spec={}, pool=pool, **fields)


def test_a_running_jobs_row_shows_progress_and_time_left(user_client, user, cpu_pool):
    _job(user, cpu_pool, status="running", step=25, total_steps=100,
         started_at=timezone.now() - timedelta(seconds=60))  # 60 s for 25 steps: 180 s left
    page = user_client.get("/").content.decode()
    assert '<progress max="1" value="0.250"' in page and "25%" in page
    assert "<th class=\"opt\">ETA</th>" in page
    assert ">3m 00s<" in page or ">3m 01s<" in page or ">2m 59s<" in page


def test_the_polled_fragment_carries_the_same_cells(user_client, user, cpu_pool):
    _job(user, cpu_pool, status="running", step=10, total_steps=20, started_at=timezone.now() - timedelta(seconds=10))
    fragment = user_client.get("/", headers={"HX-Request": "true", "HX-Target": "job-results"}).content.decode()
    assert "<html" not in fragment and 'class="eta opt"' in fragment and "10s" in fragment


def test_eta_follows_the_charts_formula_and_only_for_running_jobs(user, cpu_pool):
    started = timezone.now() - timedelta(seconds=100)
    running = _job(user, cpu_pool, status="running", step=50, total_steps=200, started_at=started)
    assert abs(eta_seconds(running) - 300) < 2
    assert eta(_job(user, cpu_pool, status="running", step=0, total_steps=200, started_at=started)) == ""
    assert eta(_job(user, cpu_pool, status="succeeded", step=200, total_steps=200, started_at=started,
                    finished_at=timezone.now())) == ""
    assert eta(_job(user, cpu_pool, status="running", step=1, total_steps=100,
                    started_at=timezone.now() - timedelta(hours=1))) == "99h 00m"
