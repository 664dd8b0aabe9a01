"""A Slurm pool's page in headless Chromium, against the real cluster: the partition's nodes,
their state and GPUs, and which TrainHub job runs where; a node an operator takes down shows
as down with its reason. TRAINHUB_UPDATE_SCREENSHOTS=1 refreshes docs/screenshots/slurm-*.png."""
from __future__ import annotations

import re

import pytest

from tests.asgi_server import serving
from tests.conftest import wait_for
from tests.e2e.browser import BROWSER_MARKS
from tests.e2e.pages import browser_pages
from tests.e2e.test_browser import shot
from tests.slurm.test_jobs import LONG, log_text, slurm_pool, submit  # noqa: F401 (fixture)
from trainhub.jobs.models import LogLine

pytestmark = BROWSER_MARKS


@pytest.fixture
def staff_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("admin", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def page(live_settings, staff_client, tmp_path, monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop here
    with serving(live_settings, tmp_path / "uvicorn.log") as web, browser_pages(web, staff_client) as new_page:
        page = new_page()
        page.set_default_timeout(20_000)
        page.base = web.url
        yield page


def test_the_slurm_pool_page_shows_the_nodes_their_gpus_and_which_job_runs_where(
        page, start_worker, slurm_pool, slurm_cluster, slurm_cluster_handle, staff_client, tmp_path):  # noqa: F811
    start_worker("hpc", slots=2, extra_env={"SLURM_CONF": slurm_cluster})
    job_id = submit(staff_client, {**LONG, "name": "ddp across n1 and n2", "mode": "ddp",
                                   "resources": {"nodes": 2, "procs_per_node": 1}})
    wait_for(lambda: "running as slurm job" in log_text(job_id), timeout=120, message="the 2-node job to run")
    wait_for(lambda: set(LogLine.objects.filter(job_id=job_id, stream="o").values_list("rank", flat=True)) >= {0, 1},
             timeout=120, message="both nodes' ranks in the log")
    page.goto(f"{page.base}/pools/hpc")
    for node in ("n1", "n2"):
        row = page.locator(f"#slurm-nodes tr[data-node={node}]")
        assert row.locator("td").nth(1).inner_text() in ("mixed", "allocated")
        assert row.locator("td").nth(2).inner_text() == "0 / 2"  # GPUs: the cluster's fake ones, none asked for
        assert row.locator("td").nth(4).inner_text() == f"#{job_id} ddp across n1 and n2"
    shot(page, tmp_path, "slurm-pool.png")
    page.goto(f"{page.base}/jobs/{job_id}")
    page.wait_for_function("document.body.innerText.includes('running as slurm job')")
    assert page.locator("select[name=rank] option[value='1']").count() == 1  # node n2's rank is in the log
    shot(page, tmp_path, "slurm-2node-log.png")

    slurm_cluster_handle.run("scontrol", "update", "nodename=n2", "state=drain", "reason=fan broken")
    try:
        page.goto(f"{page.base}/pools/hpc")  # the live part re-polls too; a reload is the simplest look
        state = page.locator("#slurm-nodes tr[data-node=n2] td").nth(1).inner_text()
        assert re.match(r"^(mixed\+drain|draining|drng|drain\S*|allocated\+drain)", state) and "(fan broken" in state, state
    finally:
        slurm_cluster_handle.run("scontrol", "update", "nodename=n2", "state=resume", check=False)
