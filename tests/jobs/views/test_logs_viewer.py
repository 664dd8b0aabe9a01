"""The job page's log viewer: tail, paging back, filters, search, first error, download, escaping."""
from __future__ import annotations

import pytest

from trainhub.jobs import logs
from trainhub.jobs.models import Job, Metric


@pytest.fixture
def job(user, cpu_pool, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # publishing is best effort; the DB is what counts here
    logs.redis_client.cache_clear()
    job = Job.objects.create(owner=user, name="viewer", mode="ddp", pool=cpu_pool, status="succeeded",
                             spec={"resources": {"procs_per_node": 2}})
    yield job
    logs.redis_client.cache_clear()


def store(job, lines):
    logs.LogLine.objects.bulk_create([logs.LogLine(job=job, seq=l[0], rank=l[1], stream=l[2], text=l[3])
                                      for l in lines])


def numbered(job, count, every=None):
    store(job, [(i, i % 2, "e" if every and i % every == 0 else "o", f"step {i} loss 0.5") for i in range(count)])


def test_the_page_opens_at_the_tail_and_not_with_the_whole_log(user_client, job):
    numbered(job, 2000)
    page = user_client.get(f"/jobs/{job.pk}").content.decode()
    assert 'id="L1999"' in page and 'id="L1500"' in page
    assert 'id="L1499"' not in page and 'id="L0"' not in page
    assert f"/jobs/{job.pk}/logs/page?before=1500" in page


def test_load_older_returns_the_previous_page_with_its_own_button(user_client, job):
    numbered(job, 1200)
    body = user_client.get(f"/jobs/{job.pk}/logs/page?before=1000", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="L999"' in body and 'id="L500"' in body and 'id="L499"' not in body
    assert "before=500" in body
    first = user_client.get(f"/jobs/{job.pk}/logs/page?before=300", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="L0"' in first and "Load older" not in first


def test_a_permalink_opens_the_page_around_that_line(user_client, job):
    numbered(job, 5000)
    page = user_client.get(f"/jobs/{job.pk}?line=42").content.decode()
    assert 'id="L42"' in page and 'id="L0"' in page and 'id="L4999"' not in page
    assert "Load newer lines" in page


def test_rank_and_stream_filters_show_only_those_lines(user_client, job):
    numbered(job, 100, every=10)
    page = user_client.get(f"/jobs/{job.pk}?rank=1").content.decode()
    assert 'id="L1"' in page and 'id="L2"' not in page
    page = user_client.get(f"/jobs/{job.pk}?stream=e").content.decode()
    assert 'id="L10"' in page and 'id="L11"' not in page


def test_search_finds_lines_far_outside_the_visible_tail_and_highlights_them(user_client, job):
    numbered(job, 3000)
    store(job, [(3000, 0, "o", "RuntimeError: <CUDA> out of memory")])
    store(job, [(3001 + i, 0, "o", "tail line") for i in range(600)])
    Job.objects.filter(pk=job.pk).update(log_lines=3601)
    body = user_client.get(f"/jobs/{job.pk}/logs/search?q=cuda", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="L3000"' in body
    assert "<mark>CUDA</mark>" in body and "&lt;" in body and "<CUDA>" not in body
    assert "1 line matching" in body
    full = user_client.get(f"/jobs/{job.pk}/logs/search?q=cuda").content.decode()
    assert "<html" in full and 'id="L3000"' in full


def test_search_is_paginated(user_client, job):
    numbered(job, 450)
    body = user_client.get(f"/jobs/{job.pk}/logs/search?q=loss", HTTP_HX_REQUEST="true").content.decode()
    assert body.count('class="line') == 100 and "after=99" in body
    more = user_client.get(f"/jobs/{job.pk}/logs/search?q=loss&after=99", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="L100"' in more and 'id="L99"' not in more


def test_jump_to_first_error_opens_the_page_at_the_traceback(user_client, job):
    numbered(job, 500)
    store(job, [(500, 1, "e", "Traceback (most recent call last):"), (501, 1, "e", "ValueError: bad")])
    response = user_client.get(f"/jobs/{job.pk}/logs/first-error")
    assert response.status_code == 302 and response["Location"].endswith("?line=500#L500")


def test_first_error_far_into_a_long_log_is_found_and_an_early_one_wins_over_a_late_one(user_client, job):
    probe = logs.FIRST_ERROR_PROBE  # on PostgreSQL past it the lookup goes through the search index
    numbered(job, probe + 3000)
    store(job, [(probe + 3000, 0, "e", "RuntimeError: CUDA error: out of memory"), (probe + 3001, 0, "o", "an exception")])
    response = user_client.get(f"/jobs/{job.pk}/logs/first-error")
    assert response["Location"].endswith(f"?line={probe + 3000}#L{probe + 3000}")
    store(job, [(probe + 3002, 0, "o", "later error")])
    logs.LogLine.objects.filter(job=job, seq=7).update(text="warning: an Exception was ignored")
    assert user_client.get(f"/jobs/{job.pk}/logs/first-error")["Location"].endswith("?line=7#L7")


def test_a_log_without_an_error_says_so(user_client, job):
    numbered(job, logs.FIRST_ERROR_PROBE + 10)
    assert user_client.get(f"/jobs/{job.pk}/logs/first-error")["Location"].endswith("?no_error=1#log")


def test_download_returns_every_line_with_its_rank(user_client, job):
    numbered(job, 12345)
    response = user_client.get(f"/jobs/{job.pk}/logs/download")
    assert response.streaming and "attachment" in response["Content-Disposition"]
    text = b"".join(response.streaming_content).decode()
    lines = text.splitlines()
    assert len(lines) == 12345
    assert lines[0] == "[rank0]: step 0 loss 0.5" and lines[-1] == "[rank0]: step 12344 loss 0.5"


def test_hostile_lines_and_ansi_colours_render_as_text_and_colour(user_client, job):
    store(job, [(0, 0, "o", "<script>alert(1)</script>"), (1, 0, "o", '<img src=x onerror="alert(2)">'),
                (2, 0, "o", "\x1b[1;31mred bold\x1b[0m plain")])
    page = user_client.get(f"/jobs/{job.pk}").content.decode()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page
    assert '<span class="ansi-bold ansi-red">red bold</span> plain' in page


def test_other_users_cannot_read_the_log(client, django_user_model, job):
    django_user_model.objects.create_user("mallory", password="x" * 12)
    client.login(username="mallory", password="x" * 12)
    for url in ("logs/download", "logs/search?q=a", "logs/page?before=5", "metrics.json", "metrics.csv"):
        assert client.get(f"/jobs/{job.pk}/{url}").status_code == 404


def test_metrics_export_as_csv_and_json(user_client, job):
    Metric.objects.bulk_create([Metric(job=job, step=s, name=n, value=s / 10) for s in range(5) for n in ("loss", "lr")])
    data = user_client.get(f"/jobs/{job.pk}/metrics.json").json()
    assert data["series"]["loss"] == {"steps": [0, 1, 2, 3, 4], "values": [0.0, 0.1, 0.2, 0.3, 0.4]}
    assert user_client.get(f"/jobs/{job.pk}/metrics.json?after=2").json()["series"]["lr"]["steps"] == [3, 4]
    response = user_client.get(f"/jobs/{job.pk}/metrics.csv")
    rows = b"".join(response.streaming_content).decode().splitlines()
    assert rows[0] == "step,name,value,at" and len(rows) == 11 and rows[1].startswith("0,loss,0.0,")


def test_progress_and_eta_come_with_the_metrics(user_client, job):
    from datetime import timedelta

    from django.utils import timezone

    Job.objects.filter(pk=job.pk).update(status="running", started_at=timezone.now() - timedelta(seconds=100),
                                         finished_at=None, step=25, total_steps=100)
    data = user_client.get(f"/jobs/{job.pk}/metrics.json").json()
    assert data["active"] and data["step"] == 25 and data["total_steps"] == 100
    assert 290 < data["eta_seconds"] < 310


def test_compare_shows_the_chosen_metric_of_several_visible_jobs(user_client, job, user, cpu_pool, django_user_model):
    other = Job.objects.create(owner=user, name="other", mode="centralized", pool=cpu_pool, spec={}, status="running")
    stranger = django_user_model.objects.create_user("bob")
    hidden = Job.objects.create(owner=stranger, name="secret-run", mode="centralized", pool=cpu_pool, spec={})
    Metric.objects.bulk_create([Metric(job=j, step=s, name="loss", value=1.0) for j in (job, other) for s in range(3)])
    page = user_client.get(f"/jobs/compare?ids={job.pk}&ids={other.pk},{hidden.pk}").content.decode()
    assert f"#{job.pk} viewer" in page and f"#{other.pk} other" in page and "secret-run" not in page
    assert f"/jobs/{other.pk}/metrics.json" in page and '<script id="compare-metrics" type="application/json">["loss"]' in page


def test_compare_says_when_no_job_has_the_asked_metric_instead_of_an_empty_chart(user_client, job):
    Metric.objects.bulk_create([Metric(job=job, step=s, name=n, value=1.0) for s in range(3) for n in ("train_loss", "val_acc")])
    page = user_client.get(f"/jobs/compare?ids={job.pk}&metric=loss").content.decode()
    assert "No job here has a metric named “loss”. They have: train_loss, val_acc." in page
    assert '<script id="compare-metrics" type="application/json">["train_loss", "val_acc"]' in page
    known = user_client.get(f"/jobs/compare?ids={job.pk}&metric=val_acc").content.decode()
    assert "No job here has" not in known and '<script id="compare-metrics" type="application/json">["val_acc"]' in known
