"""The Content-Security-Policy (trainhub/core/csp.py) in a real browser: the job list (htmx polling with a
trigger filter), the new-job form (inline validation), a finished job's page (uPlot charts, log search and
its Clear link), the pool page (confirm before cancelling all) and the admin all work, and the browser
reports no violation of the policy — while an injected inline script is refused."""
from __future__ import annotations

import os

import pytest

from tests.asgi_server import WebServer
from tests.e2e.browser import BROWSER_MARKS, CHROMIUM

pytestmark = BROWSER_MARKS

WATCH = """() => { window.__csp = []; document.addEventListener('securitypolicyviolation',
  e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI)); }"""


@pytest.fixture
def page(live_settings, transactional_db, tmp_path, django_user_model):
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    boss = django_user_model.objects.create_superuser("boss", password="x")
    boss.password = PBKDF2PasswordHasher().encode("boss-password-1", "cspsalt", iterations=1000)
    boss.save(update_fields=["password"])
    server = WebServer(live_settings, tmp_path / "web.log").start()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        page.set_default_timeout(30_000)
        page.add_init_script(f"({WATCH})()")
        page.base = server.url
        page.goto(server.url + "/login")
        page.fill("input[name=username]", "boss")
        page.fill("input[name=password]", "boss-password-1")
        page.click("button[type=submit], input[type=submit]")
        page.wait_for_url(server.url + "/")
        yield page
        browser.close()
    server.stop()


def violations(page) -> list[str]:
    return page.evaluate("() => window.__csp || []")


def test_the_htmx_pages_and_charts_work_under_the_policy_and_an_injected_script_does_not(page, cpu_pool):
    from playwright.sync_api import expect

    from trainhub.jobs import logs
    from trainhub.jobs.models import Job, Status

    from django.contrib.auth import get_user_model

    boss = get_user_model().objects.get(username="boss")
    job = Job.submit(owner=boss, name="charted", mode="centralized", spec={"name": "charted"}, pool=cpu_pool)
    logs.append_lines(job.pk, [(i, 0, "o", f"step {i} loss {1 / (i + 1):.3f}") for i in range(20)])
    for step in range(1, 6):
        logs.record_metrics(job.pk, step, {"loss": 1.0 / step})
    Job.objects.filter(pk=job.pk).update(status=Status.SUCCEEDED)

    page.goto(page.base + "/")
    expect(page.locator("#job-results")).to_contain_text("charted")
    page.wait_for_timeout(2500)  # one poll of the list (hx-trigger="every 2s [filter]")

    page.goto(page.base + "/jobs/new")
    page.fill("input[name=lr]", "-1")
    expect(page.locator("#err-lr")).not_to_be_empty()  # the inline check (htmx) answered

    page.goto(f"{page.base}/jobs/{job.pk}")
    expect(page.locator("#charts figure.chart[data-series=loss]")).to_have_count(1)
    expect(page.locator("#charts canvas").first).to_be_visible()

    page.goto(f"{page.base}/pools/cpu")
    page.once("dialog", lambda dialog: dialog.dismiss())  # data-confirm asks; dismissed, nothing is sent
    page.click("text=Cancel all jobs of this pool")
    assert page.url.endswith("/pools/cpu")

    page.goto(page.base + "/admin/pools/workerpool/")
    expect(page.locator("#result_list")).to_contain_text("cpu")
    assert violations(page) == []

    page.evaluate("() => { const s = document.createElement('script'); s.textContent = 'window.__ran = 1';"
                  " document.body.appendChild(s); }")
    page.wait_for_timeout(200)
    assert page.evaluate("() => window.__ran") is None
    assert any(v.startswith("script-src") for v in violations(page))
