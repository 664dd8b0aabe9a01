"""Headless Chromium on a job page that comes back far behind its log: it is told what was not
replayed, can page back through it, and shows the newest lines (then live ones) — the ``skipped``
event's handler in static/js/logview.js, with ``TRAINHUB_SSE_FINISHED_LINES`` at 300."""
from __future__ import annotations

from contextlib import contextmanager

import pytest

from tests.asgi_server import serving
from tests.e2e.browser import BROWSER_MARKS
from tests.e2e.pages import browser_pages
from trainhub.jobs import logs
from trainhub.jobs.models import Job

pytestmark = BROWSER_MARKS
KEEP = 300


@pytest.fixture
def web(live_settings, transactional_db, tmp_path):
    with serving(live_settings, tmp_path / "uvicorn.log", TRAINHUB_SSE_FINISHED_LINES=str(KEEP)) as server:
        yield server


def print_lines(job: Job, start: int, end: int) -> None:
    for lo in range(start, end, 1000):
        logs.append_lines(job.pk, [logs.Line(s, 0, "o", f"step {s} loss 0.5") for s in range(lo, min(end, lo + 1000))])


@contextmanager
def following(web, user_client, job: Job):
    """A browser page on ``job`` once its log is live."""
    from playwright.sync_api import expect

    with browser_pages(web, user_client) as new_page:
        page = new_page()
        page.goto(f"{web.url}/jobs/{job.pk}")
        expect(page.locator("#log-state")).to_have_text("live", timeout=15_000)
        yield page


@pytest.fixture
def running_job(user, cpu_pool, monkeypatch):
    """A running job of ``user`` whose first ``lines`` lines are stored."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop here

    def make(name: str, lines: int) -> Job:
        job = Job.objects.create(owner=user, name=name, mode="centralized", spec={}, pool=cpu_pool, status="running")
        print_lines(job, 0, lines)
        return job
    return make


def seqs_on_screen(page) -> list[int]:
    return page.eval_on_selector_all("#log > .line", "rows => rows.map(r => +r.dataset.seq)")


def test_a_page_that_reconnects_after_a_finished_jobs_long_end_shows_the_notice_the_newest_lines_and_pages_back(
        web, user_client, running_job):
    from playwright.sync_api import expect

    job = running_job("long end", 20)
    with following(web, user_client, job) as page:
        expect(page.locator("#L19")).to_contain_text("step 19")
        web.stop()  # a restart of the web server (or a laptop asleep): the page keeps trying to reconnect
        print_lines(job, 20, 3000)
        job.transition("succeeded", reason="test")
        web.start()  # the browser's EventSource comes back with Last-Event-ID 19

        expect(page.locator("#log-state")).to_have_text("job succeeded · end of log", timeout=30_000)
        notice = page.locator("#log > .skipped")
        expect(notice).to_contain_text("Lines 20–2,699 (2,680) are not replayed here")
        assert seqs_on_screen(page) == list(range(3000 - KEEP, 3000))  # the rows before the gap went too
        expect(notice.get_by_role("link", name="download the whole log")).to_have_attribute(
            "href", f"/jobs/{job.pk}/logs/download")

        older = page.locator("#log > a.older")
        expect(older).to_have_attribute("href", f"/jobs/{job.pk}/logs/page?before={3000 - KEEP}")
        older.click()  # the paged view, swapped in place: the 500 lines just before the newest ones
        expect(page.locator(f"#L{3000 - KEEP - 1}")).to_contain_text(f"step {3000 - KEEP - 1}")
        assert seqs_on_screen(page) == list(range(3000 - KEEP - 500, 3000))
        expect(page.locator("#log > a.older")).to_have_attribute(
            "href", f"/jobs/{job.pk}/logs/page?before={3000 - KEEP - 500}")


def test_following_again_after_a_long_pause_on_a_running_job_skips_to_the_newest_lines_and_goes_on_live(
        web, user_client, running_job):
    from playwright.sync_api import expect

    job = running_job("chatty", 10)
    with following(web, user_client, job) as page:
        follow = page.locator("#log-follow")
        follow.click()
        expect(follow).to_have_text("Paused · follow")
        print_lines(job, 10, 5000)  # printed while paused: the page must not replay 4,990 lines
        follow.click()

        notice = page.locator("#log > .skipped")
        expect(notice).to_contain_text("Lines 10–4,699 (4,690) are not replayed here", timeout=15_000)
        expect(page.locator("#L4999")).to_contain_text("step 4999")
        print_lines(job, 5000, 5003)  # and the log goes on live
        expect(page.locator("#L5002")).to_contain_text("step 5002", timeout=15_000)
        assert seqs_on_screen(page) == list(range(5000 - KEEP, 5003))
        job.transition("succeeded", reason="test")
        expect(page.locator("#log-state")).to_have_text("job succeeded · end of log", timeout=15_000)
