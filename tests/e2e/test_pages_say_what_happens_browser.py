"""Headless Chromium on the pages a newcomer watches when something waits, fails or is compared:
each says what is happening, on a desktop and on a phone."""
from __future__ import annotations

import re
import time

import pytest

from tests.e2e.browser import BROWSER_MARKS
from tests.e2e.pages import PHONE, browser_pages, finished_job, running_job
from trainhub.jobs.models import Job
from trainhub.pools.models import Worker

pytestmark = BROWSER_MARKS


@pytest.fixture
def new_page(web, user_client, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop here
    with browser_pages(web, user_client) as new_page:
        yield new_page


def test_a_waiting_job_says_why_and_the_reason_follows_the_pool_live(web, new_page, user, cpu_pool):
    from playwright.sync_api import expect

    job = Job.submit(owner=user, name="waits", mode="centralized", spec={"name": "waits"}, pool=cpu_pool)
    page = new_page()
    page.goto(f"{web.url}/jobs/{job.pk}")
    expect(page.locator("#waiting-reason")).to_contain_text("no worker of pool cpu is online")
    Worker.objects.create(hostname="w@test", pool=cpu_pool)  # a worker comes online: the page hears it
    expect(page.locator("#waiting-reason")).to_contain_text("#1 in the queue of pool cpu", timeout=10_000)
    page.goto(web.url + "/")
    expect(page.locator("#job-rows .waiting-reason")).to_have_text("#1 in the queue of pool cpu")


def test_a_refused_upload_keeps_its_message_and_its_text(web, new_page, cpu_pool, tmp_path):
    from playwright.sync_api import expect

    fedml = tmp_path / "fedml_config.yaml"
    fedml.write_text("common_args: {training_type: cross_silo}\ntrain_args: {epochs: 2}\n")
    page = new_page()
    page.goto(f"{web.url}/jobs/new")
    page.get_by_role("tab", name="YAML").click()
    # the tab swaps the whole form in: a file chosen before the swap lands would go with the old form
    expect(page.locator("textarea[name=spec_yaml]")).to_be_visible()
    page.locator("input[name=spec_file]").set_input_files(str(fedml))
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#err-spec_yaml")).to_contain_text("training_type")
    time.sleep(2)  # the page's own scripts have run: nothing wipes the message or the text
    expect(page.locator("#err-spec_yaml")).to_contain_text("training_type")
    assert "cross_silo" in page.locator("textarea[name=spec_yaml]").input_value()
    assert Job.objects.count() == 0


def test_typing_letters_into_a_number_field_says_it_is_not_a_number(web, new_page, cpu_pool):
    from playwright.sync_api import expect

    page = new_page()
    page.goto(f"{web.url}/jobs/new")
    page.locator("input[name=epochs]").fill("three")
    expect(page.locator("#err-epochs")).to_have_text("must be a whole number, e.g. 3")


def test_a_failed_job_shows_its_error_and_its_log_ends_on_the_red_outcome(web, new_page, user, cpu_pool):
    from playwright.sync_api import expect

    job = finished_job(user, cpu_pool, "crash", 0.1, [2.0 - i / 10 for i in range(60)], status="failed")
    page = new_page()
    page.goto(f"{web.url}/jobs/{job.pk}")
    expect(page.locator("#job-failure")).to_contain_text("ZeroDivisionError: division by zero")
    expect(page.locator("#log-state")).to_have_text("job failed · end of log")
    expect(page.locator("#log-follow")).to_be_hidden()
    log = page.locator("#log")
    assert log.evaluate("l => l.scrollHeight - l.scrollTop - l.clientHeight") < 5  # scrolled to the outcome
    last = page.locator("#log .line.s.bad .t")
    expect(last).to_have_text("finished: exited with code 1")
    assert last.evaluate("e => getComputedStyle(e).color") == "rgb(255, 135, 135)"  # red, not green
    page.locator("#job-failure a", has_text="show it in the log").click()
    expect(page.locator("#log .line:target")).to_contain_text("ZeroDivisionError")


def test_the_job_page_opens_on_progress_and_a_summary_above_the_log(web, new_page, user, cpu_pool):
    from playwright.sync_api import expect

    job = finished_job(user, cpu_pool, "fine", 0.01, [1.0, 0.5, 0.7])
    page = new_page()
    page.goto(f"{web.url}/jobs/{job.pk}")
    summary = page.locator("#metric-summary div[data-metric=loss] dd")
    expect(summary).to_have_text("0.7 best 0.5 @ step 20")
    charts, log = page.locator("#charts-card").bounding_box(), page.locator("#log-card").bounding_box()
    assert charts["y"] < log["y"] and charts["y"] < 800  # above the fold on a laptop screen
    assert len(re.findall(r"step \d+/\d+", page.locator("main").inner_text())) == 1  # one step count


def test_on_a_phone_the_job_list_fits_and_shows_status_progress_and_duration(web, new_page, user, cpu_pool):
    for i in range(3):
        running_job(user, cpu_pool, f"a-rather-long-experiment-name-{i}", 30 * (i + 1), 100)
    page = new_page(viewport=PHONE, mobile=True)
    page.goto(web.url + "/")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    row = page.locator("#job-rows tr").first
    for cell in (row.locator(".status"), row.locator("td.progress progress"), row.locator("td").nth(9)):
        box = cell.bounding_box()
        assert box is not None and box["x"] + box["width"] <= PHONE["width"], cell
    assert re.match(r"\d+:\d\d:\d\d", row.locator("td").nth(9).inner_text())  # the duration


def test_compare_starts_from_the_list_overlays_shared_metrics_and_diffs_the_settings(web, new_page, user, cpu_pool):
    from playwright.sync_api import expect

    a = finished_job(user, cpu_pool, "lr-high", 0.1, [1.0, 0.8, 0.7])
    b = finished_job(user, cpu_pool, "lr-low", 0.01, [1.0, 0.6, 0.4])
    page = new_page()
    page.goto(web.url + "/")
    page.get_by_label(f"Select job {a.pk}").check()
    page.get_by_label(f"Select job {b.pk}").check()
    page.get_by_role("button", name="Compare selected").click()
    expect(page.locator("#compare-chart figure.chart")).to_have_count(2)  # accuracy and loss, both jobs on each
    assert page.url.endswith(f"/jobs/compare?ids={b.pk},{a.pk}")  # the ids alone: no CSRF token in a URL
    assert sorted(page.locator("#compare-chart figure.chart").evaluate_all("fs => fs.map(f => f.dataset.metric)")) \
        == ["accuracy", "loss"]
    expect(page.locator("#config-diff")).to_contain_text("train.lr")
    page.goto(f"{web.url}/jobs/compare?ids={a.pk},{b.pk}&metric=val_loss")
    expect(page.locator("#compare-missing")).to_contain_text("No job here has a metric named “val_loss”")
    expect(page.locator("#compare-missing")).to_contain_text("accuracy, loss")


def test_cancel_asks_first_then_says_it_waits_for_the_last_checkpoint(web, new_page, user, cpu_pool):
    from playwright.sync_api import expect

    job = running_job(user, cpu_pool, "long", 10, 100)
    page = new_page()
    asked = []
    page.on("dialog", lambda d: (asked.append(d.message), d.dismiss() if len(asked) == 1 else d.accept()))
    page.goto(f"{web.url}/jobs/{job.pk}")
    page.get_by_role("button", name="Cancel").click()
    time.sleep(0.5)
    assert Job.objects.get(pk=job.pk).status == "running"  # dismissed: nothing happened
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#job-stopping")).to_contain_text("stopping: waiting for the last checkpoint (grace")
    assert "write its last checkpoint" in asked[0] and Job.objects.get(pk=job.pk).status == "cancelling"


def test_the_theme_toggle_switches_to_dark_and_is_remembered(web, new_page, user, cpu_pool):
    page = new_page()
    page.goto(web.url + "/")
    page.locator("#theme-toggle").click()
    page.reload()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(17, 19, 24)"
