"""A cross-site job's page shows a Sites panel: each site's pool, state, restarts and last sync,
from what its workers record (gang members' site state, the job's sync metrics)."""
from __future__ import annotations

import re
from datetime import timedelta

from django.utils import timezone

from tests.crosssite import sites
from trainhub.jobs import logs
from trainhub.jobs.models import Metric
from trainhub.runs.models import GangMember


def panel(client, job) -> str:
    response = client.get(f"/jobs/{job.pk}?fragment=sites")
    assert response.status_code == 200
    return response.content.decode()


def test_the_job_page_shows_each_sites_pool_state_and_last_sync(user_client, user):
    job = sites.running_job(user)
    page = user_client.get(f"/jobs/{job.pk}").content.decode()
    assert 'id="job-sites"' in page
    rows = page.split('<tr data-pool="')[1:]
    assert [r.split('"')[0] for r in rows] == ["lab-a", "cloud-b"]
    for row in rows:
        assert "running" in row and "0 of 1" in row and ">1<" in row and ">2<" in row and "4.0\xa0KB" in row
        assert "0.25 s" in row


def test_a_lost_site_shows_its_restart_countdown_then_healed_once_it_synced_again(user_client, user):
    job = sites.running_job(user)
    b = GangMember.objects.filter(job=job, node_rank=1)
    b.update(site_state="lost", restarts=1, restart_at=timezone.now() + timedelta(seconds=14))
    html = panel(user_client, job)
    assert re.search(r"lost, restarting in 1[0-4] s", html), html
    assert "1 of 1" in html
    mark = Metric.objects.latest("pk").pk
    b.update(site_state="running", restart_at=None, metric_mark=mark)
    assert "restarted, rejoining at the next sync" in panel(user_client, job)
    logs.record_metrics(job.pk, 70, {"cloud-b/sync_outer_step": 7, "cloud-b/sync_participants": 1})
    assert "restarted, syncing alone (no peer to heal from)" in panel(user_client, job)
    logs.record_metrics(job.pk, 80, {"cloud-b/sync_outer_step": 8, "cloud-b/sync_participants": 2})
    cloud_b = panel(user_client, job).split('<tr data-pool="cloud-b"')[1]
    assert "healed" in cloud_b and ">8<" in cloud_b
    b.update(site_state="failed")
    assert "failed for good" in panel(user_client, job)


def test_a_job_on_one_pool_has_no_sites_panel(user_client, user, cpu_pool):
    from trainhub.jobs.models import Job

    job = Job.objects.create(owner=user, name="one-pool", mode="centralized", spec={}, pool=cpu_pool)
    assert 'id="job-sites"' not in user_client.get(f"/jobs/{job.pk}").content.decode()
    assert panel(user_client, job).strip() == ""
