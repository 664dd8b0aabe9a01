"""A cross-site job from the browser: pasted in the new-job page's YAML tab, run by one real
worker per site, followed to success on its page's Sites panel and log."""
from __future__ import annotations

import re

import pytest
import yaml

from tests.crosssite.test_jobs import site_workers, spec, two_pools  # noqa: F401 (fixtures)
from tests.e2e.browser import BROWSER_MARKS
from tests.e2e.pages import browser_pages
from trainhub.jobs.models import Job

pytestmark = BROWSER_MARKS


@pytest.fixture
def page(web, user_client, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop here
    with browser_pages(web, user_client) as new_page:
        yield new_page()


def test_a_cross_site_job_pasted_in_the_yaml_tab_runs_on_both_sites_and_its_page_shows_them_finish(
        web, page, site_workers):  # noqa: F811
    from playwright.sync_api import expect

    page.goto(web.url + "/jobs/new")
    page.click("button[value=to_yaml]")
    page.wait_for_selector("#yaml-tab textarea:visible")
    page.fill("#yaml-tab textarea", yaml.safe_dump(spec(name="browser two-sites")))
    page.click("button[value=submit]")
    page.wait_for_url(re.compile(r".*/jobs/\d+$"))
    job = Job.objects.get(pk=int(re.search(r"/jobs/(\d+)$", page.url).group(1)))
    assert [s.pool for s in job.spec_model.sites] == ["lab-a", "cloud-b"]
    expect(page.locator("#job-status .status")).to_have_text("succeeded", timeout=240_000)
    for pool in ("lab-a", "cloud-b"):  # the Sites panel, as the live stream left it
        row = page.locator(f'#job-sites tr[data-pool="{pool}"]')
        expect(row.locator(".site-state")).to_have_text("finished")
        expect(row.locator(".site-outer")).to_have_text("6")
        expect(row.locator(".site-participants")).to_have_text("2")
    expect(page.locator("#log")).to_contain_text("[site cloud-b]")
