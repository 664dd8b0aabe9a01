"""Headless Chromium on a running job's page: one live connection and no polling, yet status,
progress, charts and files follow the job; after a cut connection the page shows the truth."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.asgi_server import AsgiServer
from tests.e2e.browser import BROWSER_MARKS
from tests.e2e.pages import browser_pages
from trainhub.jobs import rundir
from trainhub.jobs import logs
from trainhub.jobs.models import Job

pytestmark = BROWSER_MARKS


@pytest.fixture
def job(user, cpu_pool):
    job = Job.objects.create(owner=user, name="live-page", mode="centralized", spec={}, pool=cpu_pool)
    job.transition("running", reason="claimed by test-worker")
    logs.record_progress(job.pk, 1, 100)
    logs.append_lines(job.pk, [logs.Line(i, 0, "o", f"warming up {i}") for i in range(3)])
    return job


@pytest.fixture
def page(web, user_client, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop here
    with browser_pages(web, user_client) as new_page:
        yield new_page()


def step(job, n: int, loss: float) -> None:
    logs.record_metrics(job.pk, n, {"loss": loss})
    logs.record_progress(job.pk, n, 100)
    logs.append_lines(job.pk, [logs.Line(logs.next_seq(job.pk), 0, "o", f"step {n} loss {loss}")])


def test_one_stream_and_no_polling_carry_status_progress_charts_and_files(web, job, page):
    from playwright.sync_api import expect

    requests: list[tuple[float, str]] = []
    page.on("request", lambda r: requests.append((time.monotonic(), r.url)))
    page.goto(f"{web.url}/jobs/{job.pk}")
    expect(page.locator("#log-state")).to_have_text("live")
    expect(page.locator("#job-status .status")).to_have_text("running")
    page.wait_for_load_state("load")
    time.sleep(1)  # the page's own assets are in ("networkidle" never comes: the stream stays open)
    start = time.monotonic()
    for n in range(10):  # ten seconds of a job that prints, steps and writes a file
        step(job, 10 * (n + 1), 1.0 / (n + 1))
        if n == 5:
            path = rundir.run_dir(job.pk) / "final-model.pt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"weights")
        time.sleep(1)
    during = [url for at, url in requests if at >= start]
    assert during == [], f"the page made requests while the job ran: {during}"
    streams = [url for _, url in requests if "/logs/stream" in url]
    assert len(streams) == 1 and "channel=page" in streams[0]
    assert not [url for _, url in requests if "fragment=" in url or "metrics.json" in url or "/lines" in url]
    expect(page.locator("#job-eta")).to_contain_text("step 100/100")
    assert page.locator(".job-steps").count() == 0  # one step count on the page: the progress line's
    expect(page.locator("#charts figure.chart[data-series=loss]")).to_have_count(1)
    expect(page.locator("#job-files")).to_contain_text("final-model.pt")
    expect(page.locator("#log .line").last).to_contain_text("step 100 loss 0.1")
    job.transition("succeeded", reason="exit code 0")
    expect(page.locator("#job-status .status")).to_have_text("succeeded")
    expect(page.locator("#job-history")).to_contain_text("exit code 0")
    expect(page.locator("#log-state")).to_contain_text("end of log")
    assert page.locator("#job-status button.danger").count() == 0  # no Cancel on a finished job
    ended = time.monotonic()
    time.sleep(3)
    assert [url for at, url in requests if at >= ended] == []  # the page stopped listening


def test_after_a_cut_connection_the_page_shows_the_true_final_status(web, job, page, tmp_path):
    from playwright.sync_api import expect

    page.goto(f"{web.url}/jobs/{job.pk}")
    expect(page.locator("#log-state")).to_have_text("live")
    web.stop()  # the stream is cut; what happens next the page cannot hear
    step(job, 60, 0.2)
    job.transition("failed", reason="exit code 3: CUDA out of memory", exit_code=3)
    expect(page.locator("#job-status .status")).to_have_text("running")  # nothing told it yet
    restarted = AsgiServer(web.port, web.env, tmp_path / "uvicorn-2.log").start()
    try:
        expect(page.locator("#job-status .status")).to_have_text("failed", timeout=30_000)
        expect(page.locator("#job-history")).to_contain_text("CUDA out of memory")
        expect(page.locator("#job-eta")).to_contain_text("step 60/100")
        expect(page.locator("#charts figure.chart[data-series=loss]")).to_have_count(1)
        expect(page.locator("#log-state")).to_contain_text("job failed · end of log")
    finally:
        restarted.stop()


def test_a_cross_site_jobs_sites_panel_follows_a_lost_site_on_the_same_stream(web, user, page):
    from playwright.sync_api import expect

    from tests.crosssite import sites
    from trainhub.jobs.models import Metric
    from trainhub.runs.models import GangMember

    job = sites.running_job(user)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(f"{web.url}/jobs/{job.pk}")
    expect(page.locator("#log-state")).to_have_text("live")
    cloud_b = page.locator('#job-sites tr[data-pool="cloud-b"]')
    expect(cloud_b.locator(".site-state")).to_have_text("running")
    seen = len(requests)
    b = GangMember.objects.filter(job=job, node_rank=1)
    b.update(site_state="lost", restarts=1, restart_at=timezone.now() + timedelta(seconds=14))
    expect(cloud_b.locator(".site-state")).to_contain_text("lost, restarting in")
    expect(cloud_b).to_contain_text("1 of 1")
    b.update(site_state="running", restart_at=None, metric_mark=Metric.objects.latest("pk").pk)
    logs.record_metrics(job.pk, 80, {"cloud-b/sync_outer_step": 8, "cloud-b/sync_participants": 2})
    expect(cloud_b.locator(".site-state")).to_have_text("healed")
    expect(cloud_b.locator(".site-outer")).to_have_text("8")
    assert requests[seen:] == [], f"the page made requests for the Sites panel: {requests[seen:]}"
    assert len([url for url in requests if "/logs/stream" in url]) == 1


def test_live_rows_are_the_rows_the_server_renders_for_the_same_lines(web, job, page):
    """The live channel sends a line's text (and HTML only where it has colour or control codes); the page
    builds each row itself. Those rows must be the server's (``ansi.row``, what a reload shows): the same
    classes, permalink, rank and escaping, hostile text never markup."""
    from playwright.sync_api import expect

    page.goto(f"{web.url}/jobs/{job.pk}")
    expect(page.locator("#log-state")).to_have_text("live")
    texts = [(0, "o", "<script>window.owned = 1</script> & <b>bold?</b>"),
             (1, "e", '<img src=x onerror="window.owned = 2"> "quoted" \'single\''),
             (0, "o", "\x1b[1;31mred <i>bold</i>\x1b[0m plain \x1b[2K\x07bell"),
             (0, "o", "tab\tseparated  spaces and ☃ 😀 \u00a0nbsp"),
             (0, "s", "finished: exited with code 0"),
             (0, "s", "finished: exited with code 3"),
             (0, "s", "some system line")]
    logs.append_lines(job.pk, [logs.Line(3 + i, rank, stream, text) for i, (rank, stream, text) in enumerate(texts)])
    expect(page.locator("#log .line")).to_have_count(3 + len(texts))
    rows = "els => els.map(e => e.outerHTML)"
    live = page.eval_on_selector_all("#log .line", rows)
    assert page.evaluate("window.owned") is None
    page.reload()  # now the server renders every row
    expect(page.locator("#log .line")).to_have_count(3 + len(texts))
    served = page.eval_on_selector_all("#log .line", rows)
    assert live == served
    assert 'class="line s ok"' in live[-3] and 'class="line s bad"' in live[-2] and 'class="line s"' in live[-1]
    assert '<span class="ansi-bold ansi-red">red &lt;i&gt;bold&lt;/i&gt;</span>' in live[5]
