"""Log retention per pool: on by default (a million lines per job); over a cap, keep the head and
the newest lines with a clear marker where the middle was cut."""
from __future__ import annotations

import os

import pytest
from django.core.exceptions import ImproperlyConfigured

from trainhub.jobs import retention
from trainhub.jobs.models import Job, LogLine


@pytest.fixture
def job(user, cpu_pool):
    return Job.objects.create(owner=user, name="chatty", mode="centralized", pool=cpu_pool, spec={}, status="running")


def store(job, start, count):
    LogLine.objects.bulk_create([LogLine(job=job, seq=s, text=f"line {s}") for s in range(start, start + count)])


def test_retention_is_on_by_default_a_million_lines_per_job_and_star_zero_keeps_everything(monkeypatch, cpu_pool):
    from trainhub import settings as defaults

    assert "TRAINHUB_LOG_RETENTION" not in os.environ  # so the settings hold the default
    assert defaults.TRAINHUB_LOG_RETENTION == "*=1000000"
    assert cpu_pool.log_retention_lines == 0 and retention.lines_kept(cpu_pool) == 1_000_000
    cpu_pool.log_retention_lines = 20_000  # a pool's own cap wins
    assert retention.lines_kept(cpu_pool) == 20_000
    monkeypatch.setattr("django.conf.settings.TRAINHUB_LOG_RETENTION", "*=0")
    cpu_pool.log_retention_lines = 0
    assert retention.limit_for("cpu") == 0 and retention.lines_kept(cpu_pool) == 0
    monkeypatch.setattr("django.conf.settings.TRAINHUB_LOG_RETENTION", "gpu=5000000, *=20000")
    assert retention.limit_for("gpu") == 5_000_000 and retention.limit_for("cpu") == 20_000


def test_a_malformed_or_tiny_cap_is_refused_by_name(monkeypatch):
    monkeypatch.setattr("django.conf.settings.TRAINHUB_LOG_RETENTION", "gpu=lots")
    with pytest.raises(ImproperlyConfigured, match="POOL=LINES"):
        retention.limit_for("gpu")
    monkeypatch.setattr("django.conf.settings.TRAINHUB_LOG_RETENTION", "gpu=10")
    with pytest.raises(ImproperlyConfigured, match="below 10000"):
        retention.limit_for("gpu")


def test_over_the_cap_the_head_and_the_newest_lines_stay_with_a_marker_between(job):
    store(job, 0, 30_000)
    retention.enforce(job.pk, 30_000, 10_000, "cpu")
    seqs = list(LogLine.objects.filter(job=job).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(0, 1001)) + list(range(21_000, 30_000))
    marker = LogLine.objects.get(job=job, seq=1000)
    assert marker.stream == "s" and marker.text.startswith("✂ lines 1000–20999 were cut")
    assert retention.cut_range(job.pk) == (1000, 20_999)

    store(job, 30_000, 5_000)  # the job keeps printing: the cut grows, still one marker
    retention.enforce(job.pk, 35_000, 10_000, "cpu")
    assert LogLine.objects.filter(job=job).count() == 10_001
    assert retention.cut_range(job.pk) == (1000, 25_999)
    assert LogLine.objects.filter(job=job, seq__gte=26_000).count() == 9_000


def test_the_viewer_and_the_download_show_the_marker(user_client, job):
    store(job, 0, 20_000)
    retention.enforce(job.pk, 20_000, 10_000, "cpu")
    page = user_client.get(f"/jobs/{job.pk}?line=1000").content.decode()
    assert "✂ lines 1000–10999 were cut" in page and 'id="L11000"' in page
    text = b"".join(user_client.get(f"/jobs/{job.pk}/logs/download").streaming_content).decode().splitlines()
    assert len(text) == 10_001 and text[1000].startswith("✂ lines 1000–10999") and text[1001] == "line 11000"


def test_a_job_under_its_cap_is_untouched(job):
    store(job, 0, 5_000)
    assert retention.enforce(job.pk, 5_000, 10_000, "cpu") == 0
    assert LogLine.objects.filter(job=job).count() == 5_000 and retention.cut_range(job.pk) is None


def test_a_finished_job_of_a_pool_without_its_own_cap_is_cut_by_the_workers_rule(monkeypatch, job):
    """The worker's cut at the end follows ``TRAINHUB_LOG_RETENTION`` (its default included) when the
    pool sets nothing; it used to read the pool's field alone, so the default never cut at the end."""
    from workers.tasks import _trim_logs

    monkeypatch.setattr("django.conf.settings.TRAINHUB_LOG_RETENTION", "*=10000")  # the default's rule, smaller
    store(job, 0, 12_000)
    job.transition("succeeded", reason="test")
    _trim_logs(job)
    assert LogLine.objects.filter(job=job).count() == 10_001
    assert retention.cut_range(job.pk) == (1000, 2999)
