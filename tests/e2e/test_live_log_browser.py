"""Headless Chromium watches a running job's log arrive live on the job page."""
from __future__ import annotations

import threading
import time

from tests.e2e.browser import BROWSER_MARKS
from tests.e2e.pages import browser_pages
from trainhub.jobs import logs
from trainhub.jobs.models import Job

pytestmark = BROWSER_MARKS


def test_the_job_page_shows_lines_as_they_are_printed(web, user, user_client, cpu_pool, monkeypatch):
    from playwright.sync_api import expect

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop here
    job = Job.objects.create(owner=user, name="<b>live</b>", mode="centralized", spec={}, pool=cpu_pool,
                             status="running")
    logs.append_lines(job.pk, [logs.Line(i, 0, "o", f"warming up {i}") for i in range(3)])
    stop = threading.Event()

    def printer():
        seq = 3
        while not stop.is_set() and seq < 400:
            text = "<img src=x onerror=alert(1)> hostile" if seq == 10 else f"\x1b[32mstep {seq}\x1b[0m loss 0.1"
            logs.append_lines(job.pk, [logs.Line(seq, seq % 2, "o", text)])
            seq += 1
            time.sleep(0.02)

    with browser_pages(web, user_client) as new_page:
        page = new_page()
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{web.url}/jobs/{job.pk}")
        expect(page.locator("#L2")).to_contain_text("warming up 2")
        expect(page.locator("#log-state")).to_have_text("live", timeout=10_000)
        thread = threading.Thread(target=printer)
        thread.start()
        try:
            expect(page.locator("#L150")).to_contain_text("step 150", timeout=15_000)
            expect(page.locator("#L151 .ansi-green")).to_have_text("step 151")
            expect(page.locator("#L10 .t")).to_have_text("<img src=x onerror=alert(1)> hostile")
            assert page.locator("#log img").count() == 0 and dialogs == []
        finally:
            stop.set()
            thread.join()
        job.transition("succeeded", reason="test")
        expect(page.locator("#log-state")).to_contain_text("end of log", timeout=10_000)
        last = logs.next_seq(job.pk) - 1
        expect(page.locator(f"#L{last}")).to_be_visible()
        seqs = page.eval_on_selector_all("#log .line", "rows => rows.map(r => +r.dataset.seq)")
        assert seqs == list(range(last + 1))  # every line once, in order
