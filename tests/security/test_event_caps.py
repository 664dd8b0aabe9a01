"""A job's events file cannot make its worker hold it in memory or store a flood of metrics: the worker
reads it 4 MB at a time, skips a line longer than that, and keeps the first 1,000 values of one metrics
event (real worker, real job)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

WRITER = """
import json, os
with open(os.path.join(os.environ["TRAINHUB_RUN_DIR"], "events.jsonl"), "a") as out:
    values = {f"m{i}": 1.0 for i in range(200_000)}  # about 2.6 MB, one line
    out.write(json.dumps({"type": "metrics", "time": 0, "step": 1, "values": values}) + "\\n")
    out.write('{"type": "metrics", "values": {"huge": "' + "x" * 6_000_000 + '"}}\\n')  # past the 4 MB read
    out.write(json.dumps({"type": "metrics", "time": 0, "step": 2, "values": {"loss": 0.5}}) + "\\n")
print("events written", flush=True)
"""


def test_a_metrics_flood_and_an_oversized_event_are_cut_and_later_events_still_arrive(finished_script_job):
    from trainhub.jobs.models import Metric

    done = finished_script_job("events", WRITER)
    assert done.status == "succeeded", done.error
    stored = Metric.objects.filter(job_id=done.pk)
    assert stored.filter(step=1).count() == 1_000  # not 200,000 rows
    assert list(stored.filter(step=2).values_list("name", "value")) == [("loss", 0.5)]
    assert not stored.filter(name="huge").exists()
