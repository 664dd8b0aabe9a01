"""A job that logs more metric points than ``TRAINHUB_METRIC_MAX_POINTS`` keeps running, and its series
are thinned — first and last points kept — not grown without bound nor cut off at the cap; the page,
``metrics.json`` and the API say so (real worker, real script job)."""
from __future__ import annotations

import pytest

from tests.conftest import wait_for

pytestmark = pytest.mark.slow

LOGGER = """
import json, os, time
path = os.path.join(os.environ["TRAINHUB_RUN_DIR"], "events.jsonl")
for chunk in range(6):  # 3,000 steps x 2 series = 6,000 points, in several reads of the worker
    with open(path, "a") as out:
        for step in range(chunk * 500 + 1, chunk * 500 + 501):
            out.write(json.dumps({"type": "metrics", "time": 0, "step": step,
                                  "values": {"loss": 1.0 / step, "lr": 0.001}}) + "\\n")
    time.sleep(1.2)
print("still running after 6,000 points", flush=True)
"""


def test_a_job_logging_more_points_than_the_cap_runs_on_with_its_series_thinned_and_says_so(
        start_worker, cpu_pool, user, user_client, tmp_path):
    from trainhub.jobs.models import Job, Metric
    from trainhub.jobs.services import job_submit
    from trainhub.pools.models import Workspace

    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "log.py").write_text(LOGGER)
    Workspace.objects.create(name="metrics", path=str(tmp_path / "metrics"))
    start_worker("cpu", extra_env={"TRAINHUB_METRIC_MAX_POINTS": "1000"})
    job = job_submit(owner=user, data={"mode": "script", "script": {"workspace": "metrics", "entry": "log.py"}})
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=180, message="the job logging metrics to end")
    assert done.status == "succeeded", done.error

    stored = Metric.objects.filter(job_id=job.pk)
    assert 300 <= stored.count() <= 1_000, stored.count()  # not 6,000
    for name in ("loss", "lr"):
        steps = list(stored.filter(name=name).order_by("step").values_list("step", flat=True))
        assert steps[0] == 1 and steps[-1] == 3_000  # the whole curve: its start and its latest point
        assert len(steps) >= 150
    assert stored.get(name="loss", step=3_000).value == pytest.approx(1 / 3000)
    assert "thinned to stay within 1,000 stored points" in done.metrics_note

    payload = user_client.get(f"/jobs/{job.pk}/metrics.json").json()
    assert payload["metrics_note"] == done.metrics_note
    assert payload["series"]["loss"]["steps"][-1] == 3_000
    api = user_client.get(f"/api/jobs/{job.pk}/metrics").json()
    assert api["note"] == done.metrics_note and api["series"]["lr"][-1]["step"] == 3_000
    page = user_client.get(f"/jobs/{job.pk}").content.decode()
    assert "thinned to stay within 1,000 stored points" in page and 'id="metrics-note"' in page
