"""One job cannot fill the database or Redis with its log: past ``TRAINHUB_LOG_MAX_BYTES`` of output
its lines are dropped, one marker says where, and the job itself runs on (real worker, real job)."""
from __future__ import annotations

import pytest

from tests.conftest import wait_for

FLOOD = """
import sys
for i in range(20_000):
    print(f"line {i:06d} " + "x" * 88)
print("the job is still alive at the end", file=sys.stderr, flush=True)
"""


@pytest.mark.slow
def test_a_job_flooding_its_log_is_cut_at_the_byte_cap_with_a_marker_and_still_finishes(
        start_worker, cpu_pool, user, tmp_path):
    from trainhub.jobs.models import Job, LogLine
    from trainhub.jobs.services import job_submit
    from trainhub.pools.models import Workspace

    (tmp_path / "flood").mkdir()
    (tmp_path / "flood" / "flood.py").write_text(FLOOD)
    Workspace.objects.create(name="flood", path=str(tmp_path / "flood"))
    start_worker("cpu", extra_env={"TRAINHUB_LOG_MAX_BYTES": "200000"})  # 2 MB of output, 0.2 MB kept
    job = job_submit(owner=user, data={"mode": "script", "script": {"workspace": "flood", "entry": "flood.py"}})
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=180, message="the flooding job to finish")
    assert done.status == "succeeded", done.error
    stored = list(LogLine.objects.filter(job_id=job.pk).order_by("seq").values_list("stream", "text"))
    output = [text for stream, text in stored if stream != "s"]
    assert 1_000 < len(output) < 2_100  # about 200000 / 101 lines of output, not 20,000
    assert sum(len(t) + 1 for t in output) <= 200_000
    assert output[-1].startswith(f"line {len(output) - 1:06d} ")  # the first lines are kept, in order
    markers = [text for stream, text in stored if "log truncated at" in text]
    assert markers == ["trainhub: log truncated at 200,000 bytes (0.2 MB, TRAINHUB_LOG_MAX_BYTES); the job keeps running "
                       "but its further output is not stored"]
    assert "the job is still alive at the end" not in [t for _, t in stored]
    assert any(t.startswith("finished: exited with code 0") for s, t in stored if s == "s")
