"""The product in a real browser: Playwright driving Debian's headless Chromium against uvicorn
and a real Celery worker. Log in, submit from the form, watch it succeed, cancel a long job,
clone one; a non-staff user is refused the admin; staff drain a pool there.

Set TRAINHUB_UPDATE_SCREENSHOTS=1 to refresh docs/screenshots/ from this run.
"""
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.asgi_server import WebServer
from tests.conftest import ROOT, wait_for

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.browser, pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium chromium-driver)"),
]

LONG_SPEC = """name: long-synthetic
pool: cpu
data: {dataset: synthetic, samples: 100000}
train: {epochs: 50}
"""


@pytest.fixture
def browser_page(live_settings, transactional_db, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")
    # Playwright's sync API runs an event loop in this thread; the ORM calls made by fixtures and
    # assertions are still synchronous and safe here.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        page.set_default_timeout(30_000)
        page.on("dialog", lambda dialog: dialog.accept())  # "Cancel job …?", "Revoke token …?": yes
        yield page
        browser.close()


@pytest.fixture
def web(live_settings, transactional_db, tmp_path, user):
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    # the server process uses the real hashers, not the tests' fast MD5 one
    user.password = PBKDF2PasswordHasher().encode("correct-horse-battery", "browsersalt", iterations=1000)
    user.save(update_fields=["password"])
    server = WebServer(live_settings, tmp_path / "web.log").start()
    yield server
    server.stop()


def shot(page, tmp_path, name):
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("TRAINHUB_UPDATE_SCREENSHOTS"):
        target = ROOT / "docs" / "screenshots"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target / name)


def log_in(page, url, username, password):
    page.goto(url + "/login")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_url(url + "/")


def job_id_of(page) -> int:
    return int(re.search(r"/jobs/(\d+)$", page.url).group(1))


def test_log_in_submit_watch_it_succeed_cancel_a_long_job_and_clone(browser_page, web, start_worker, cpu_pool,
                                                                      user, tmp_path):
    from trainhub.jobs.models import Job

    page = browser_page
    worker = start_worker("cpu")
    log_in(page, web.url, "alice", "correct-horse-battery")

    # the typed form: mode-dependent fields come from the server as you pick a mode
    page.goto(web.url + "/jobs/new")
    page.select_option("select[name=mode]", "ddp")
    page.wait_for_selector("#mode-fields input[name=procs_per_node]")
    assert page.input_value("#mode-fields input[name=procs_per_node]") == "2"
    assert page.input_value("input[name=name]") == "digits-ddp"  # the untouched default name follows the mode
    page.wait_for_selector("#run-locally-body:has-text('torchrun --standalone --nproc-per-node 2')", state="attached")
    assert page.text_content("#mode-fields").count("required") == 0
    page.select_option("select[name=mode]", "centralized")
    page.wait_for_selector("#mode-fields select[name=dataset]")
    page.wait_for_selector("#mode-fields input[name=procs_per_node]", state="detached")
    page.fill("input[name=name]", "browser-digits")
    page.fill("input[name=epochs]", "2")
    page.fill("input[name=lr]", "-1")  # inline validation says what is wrong while typing
    page.wait_for_selector("#err-lr:has-text('greater than 0')")
    page.fill("input[name=lr]", "0.003")
    page.wait_for_selector("#err-lr:empty", state="attached")
    page.click("#run-locally summary")
    page.wait_for_selector("#run-locally-body:has-text('python -m workers.runner --config job.yaml')")
    shot(page, tmp_path, "new-job.png")
    page.click("button[value=submit]")
    page.wait_for_url(re.compile(r".*/jobs/\d+$"))
    first = job_id_of(page)
    page.wait_for_selector("#job-status .status.succeeded", timeout=180_000)
    assert Job.objects.get(pk=first).status == "succeeded", worker.output()[-2000:]
    page.wait_for_selector("text=epoch 2/2")
    shot(page, tmp_path, "job.png")

    # a long job pasted in the YAML tab, cancelled from its page
    page.goto(web.url + "/jobs/new")
    page.click("button[value=to_yaml]")
    page.wait_for_selector("#yaml-tab textarea:visible")
    page.fill("#yaml-tab textarea", LONG_SPEC)
    page.click("button[value=submit]")
    page.wait_for_url(re.compile(r".*/jobs/\d+$"))
    long_id = job_id_of(page)
    page.wait_for_selector("#job-status .status.running", timeout=120_000)
    wait_for(lambda: Job.objects.get(pk=long_id).log_lines > 1, timeout=120, message="the long job to print")
    page.click("#job-status button.danger")
    page.wait_for_selector("#job-status .status.cancelled", timeout=60_000)

    # clone the first job: the form comes prefilled, named -copy
    page.goto(f"{web.url}/jobs/{first}")
    page.click("text=Clone")
    page.wait_for_url(re.compile(r".*/jobs/new\?clone=\d+$"))
    assert page.input_value("input[name=name]") == "browser-digits-copy"
    assert page.input_value("input[name=epochs]") == "2"
    page.click("button[value=submit]")
    page.wait_for_url(re.compile(r".*/jobs/\d+$"))
    clone = Job.objects.get(pk=job_id_of(page))
    assert clone.name == "browser-digits-copy" and clone.spec["train"]["lr"] == 0.003

    page.goto(web.url + "/")
    page.wait_for_selector("text=browser-digits-copy")
    shot(page, tmp_path, "job-list.png")


def test_a_non_staff_user_is_refused_the_admin_and_makes_a_token(browser_page, web, user):
    page = browser_page
    log_in(page, web.url, "alice", "correct-horse-battery")
    page.click("text=API tokens")
    page.fill("input[name=name]", "laptop")
    page.click("text=Create token")
    token = page.text_content("#new-token-value").strip()
    assert token.startswith("th_")
    import httpx

    assert httpx.get(web.url + "/api/jobs", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    page.click("button[aria-label='Revoke token laptop']")
    page.wait_for_selector("text=revoked")
    assert httpx.get(web.url + "/api/jobs", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    page.goto(web.url + "/admin/")
    assert "/admin/login" in page.url
    assert page.locator("text=not authorized").count() >= 1
    page.goto(web.url + "/admin/pools/workerpool/")
    assert "/admin/login" in page.url


MODES = [("ddp", {"procs_per_node": "2"}), ("deepspeed", {"procs_per_node": "2"}), ("llm", {"seq_len": "64"})]


def test_each_mode_submits_from_its_own_fields_and_the_first_runs_to_success(browser_page, web, start_worker,
                                                                              cpu_pool, user):
    """Each mode's own fields reach its spec; one of them is watched running to the end on its page (every
    mode running through a worker is tests/e2e/test_every_mode_through_a_worker.py, without a browser)."""
    from trainhub.jobs.models import Job
    from trainhub.jobs.services import job_cancel

    page = browser_page
    log_in(page, web.url, "alice", "correct-horse-battery")
    pages = []
    for mode, fields in MODES:
        page.goto(web.url + "/jobs/new")
        page.select_option("select[name=mode]", mode)
        page.wait_for_selector(f"#mode-fields[data-mode={mode}]")
        page.fill("input[name=name]", f"browser-{mode}")
        page.fill("input[name=epochs]", "1")
        for name, value in fields.items():
            page.fill(f"#mode-fields input[name={name}]", value)
        page.click("button[value=submit]")
        page.wait_for_url(re.compile(r".*/jobs/\d+$"))
        job = Job.objects.get(pk=job_id_of(page))
        assert job.mode == mode and job.name == f"browser-{mode}"
        if mode == "llm":
            assert job.spec["llm"]["seq_len"] == 64
        else:
            assert job.spec["resources"]["procs_per_node"] == 2
        pages.append(page.url)
    for job in Job.objects.exclude(name="browser-ddp"):  # the other two are not run here
        assert job_cancel(job)
    page.goto(pages[0])  # the DDP job, queued until a worker comes, is watched from its page to the end
    page.wait_for_selector("#job-status .status.queued")
    start_worker("cpu")
    page.wait_for_selector("#job-status .status.succeeded", timeout=300_000)


def test_the_yaml_tab_round_trips_with_the_form_in_the_browser(browser_page, web, cpu_pool, user):
    page = browser_page
    log_in(page, web.url, "alice", "correct-horse-battery")
    page.goto(web.url + "/jobs/new")
    page.fill("input[name=name]", "round-trip")
    page.fill("input[name=epochs]", "4")
    page.click("button[value=to_yaml]")
    page.wait_for_selector("#yaml-tab textarea:visible")
    text = page.input_value("#yaml-tab textarea")
    assert "name: round-trip" in text and "epochs: 4" in text
    page.fill("#yaml-tab textarea", text.replace("epochs: 4", "epochs: 9") + "checkpoint: {keep_last: 7}\n")
    page.click("button[value=to_form]")
    page.wait_for_selector("#form-tab input[name=epochs]:visible")
    assert page.input_value("input[name=epochs]") == "9"
    assert '"keep_last": 7' in page.input_value("input[name=extra]")
    page.click("button[value=to_yaml]")
    page.wait_for_selector("#yaml-tab textarea:visible")
    assert "keep_last: 7" in page.input_value("#yaml-tab textarea")


def test_staff_drains_a_pool_in_the_admin(browser_page, web, cpu_pool, user):
    from trainhub.pools.models import WorkerPool

    user.is_staff = user.is_superuser = True
    user.save(update_fields=["is_staff", "is_superuser"])
    page = browser_page
    log_in(page, web.url, "alice", "correct-horse-battery")
    page.goto(web.url + "/admin/pools/workerpool/")
    page.check(f"input[name=_selected_action][value='{cpu_pool.pk}']")
    page.select_option("select[name=action]", "drain")
    page.click("button[name=index]")
    page.wait_for_load_state()
    assert WorkerPool.objects.get(pk=cpu_pool.pk).state == "draining"


def test_the_keyboard_reaches_search_new_job_and_the_first_error(browser_page, web, cpu_pool, user):
    from trainhub.jobs import logs
    from trainhub.jobs.models import Job

    job = Job.objects.create(owner=user, name="broken-run", mode="centralized", spec={"name": "broken-run"},
                             pool=cpu_pool, status="failed", error="exited with code 1")
    logs.append_lines(job.pk, [(i, 0, "o", f"step {i}") for i in range(40)]
                      + [(40, 0, "e", "Traceback (most recent call last):"), (41, 0, "e", "ValueError: bad")])
    page = browser_page
    log_in(page, web.url, "alice", "correct-horse-battery")

    page.keyboard.press("Tab")  # the first stop is the skip link, for keyboard and screen-reader users
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.getAttribute('name')") == "q"
    page.keyboard.type("broken")  # typed into the search, not taken as shortcuts ("n" is New job)
    page.wait_for_url(re.compile(r".*q=broken.*"))
    assert page.url.startswith(web.url + "/?") and "/jobs/new" not in page.url
    page.keyboard.press("Escape")  # leaves the field; keys are shortcuts again
    page.keyboard.press("?")
    help_box = page.locator("#key-help")
    assert help_box.is_visible() and "New job" in help_box.text_content()
    page.keyboard.press("n")
    page.wait_for_url(web.url + "/jobs/new")

    page.goto(f"{web.url}/jobs/{job.pk}")
    page.keyboard.press("e")
    page.wait_for_url(re.compile(rf".*/jobs/{job.pk}\?line=40#L40$"))
