"""The screenshots in docs/screenshots, taken the way a user sees the pages: the job list, a failed
job, a waiting job with its reason and a comparison, on a desktop, a phone and in the dark theme.

Refresh them with

    TRAINHUB_SCREENSHOTS_DIR=docs/screenshots .venv/bin/python -m pytest tests/e2e/test_screenshots.py

Without the variable the same pages are shot into a temporary directory: the test still checks
that every page renders and says what it should.
"""
from __future__ import annotations

import os
from pathlib import Path

from tests.e2e.browser import BROWSER_MARKS
from tests.e2e.pages import DESKTOP, PHONE, browser_pages, finished_job, running_job
from trainhub.jobs.models import Job
from trainhub.pools.models import WorkerPool

pytestmark = BROWSER_MARKS

README_SHOTS = {"job-list": "job-list.png", "failed-job": "job.png"}
LOOKS = {"desktop": {"viewport": DESKTOP}, "phone": {"viewport": PHONE, "mobile": True},
         "dark": {"viewport": DESKTOP, "dark": True}}


def test_screenshots_of_the_pages_a_newcomer_asks_about(web, user_client, user, cpu_pool, monkeypatch, tmp_path):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    out = Path(os.environ.get("TRAINHUB_SCREENSHOTS_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    gpu = WorkerPool.objects.create(name="gpu", kind="gpu", queue="gpu")
    a = finished_job(user, cpu_pool, "digits-lr-3e-3", 0.003, [2.3, 1.2, 0.8, 0.55, 0.42, 0.37, 0.33])
    b = finished_job(user, cpu_pool, "digits-lr-1e-2", 0.01, [2.3, 0.9, 0.61, 0.5, 0.47, 0.46, 0.46])
    failed = finished_job(user, cpu_pool, "digits-bad-batch", 0.003, [2.3, 1.4, 1.1], status="failed")
    running_job(user, cpu_pool, "digits-long-run", 340, 1000)
    waiting = Job.submit(owner=user, name="llama-finetune", mode="ddp",
                         spec={"name": "llama-finetune", "mode": "ddp", "pool": "gpu"}, pool=gpu)
    pages = {"job-list": "/", "failed-job": f"/jobs/{failed.pk}", "waiting-job": f"/jobs/{waiting.pk}",
             "compare": f"/jobs/compare?ids={a.pk},{b.pk}"}
    expected = {"job-list": "no worker of pool gpu is online", "failed-job": "ZeroDivisionError",
                "waiting-job": "no worker of pool gpu is online", "compare": "train.lr"}
    with browser_pages(web, user_client) as new_page:
        for look, options in LOOKS.items():
            page = new_page(**options)
            for name, path in pages.items():
                page.goto(web.url + path)
                page.wait_for_load_state("load")
                page.locator(f"text={expected[name]}").first.wait_for()
                if name == "compare":
                    page.locator("#compare-chart figure.chart").nth(1).wait_for()
                elif name == "failed-job":
                    page.locator("#charts figure.chart").first.wait_for()
                shot = out / f"{name}-{look}.png"
                page.screenshot(path=str(shot), full_page=look != "phone")
                assert shot.stat().st_size > 10_000, shot
                if look == "desktop" and name in README_SHOTS:  # the README's own pictures, same pages
                    page.screenshot(path=str(out / README_SHOTS[name]), full_page=True)
            if look == "desktop":
                page.goto(web.url + "/jobs/new")
                page.locator("#run-locally-body pre").first.wait_for(state="attached")
                page.locator("#run-locally summary").click()
                page.screenshot(path=str(out / "new-job.png"), full_page=True)
