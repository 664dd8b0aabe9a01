"""A cross-site job from a terminal: ``trainhub submit --follow`` against a live server with one
real worker per site, then ``trainhub status`` shows each site as the job page's Sites panel does."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.cli.conftest import token, trainhub, web_server  # noqa: F401 (fixtures: the CLI against a live server)
from tests.crosssite.test_jobs import site_workers, spec, two_pools  # noqa: F401 (fixtures)
from trainhub.jobs.models import Job

pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]


def test_submit_follow_runs_a_cross_site_job_to_success_and_status_shows_each_site(trainhub, site_workers,  # noqa: F811
                                                                                   tmp_path):
    path = tmp_path / "two-sites.yaml"
    path.write_text(yaml.safe_dump(spec()))
    result = trainhub("submit", str(path), "--follow", timeout=300)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    assert "succeeded" in result.stderr
    # one log: both sites' lines, each tagged with its site, up to the last step
    assert "[site lab-a]" in result.stdout and "[site cloud-b]" in result.stdout and "step 60/60" in result.stdout
    job_id = Job.objects.get().pk
    shown = trainhub("status", str(job_id))
    assert shown.returncode == 0, shown.stderr
    # six syncs (60 steps, every 10), both sites in each, neither restarted
    for pool in ("lab-a", "cloud-b"):
        assert re.search(rf"^\s*{pool}\s+finished\s+0 of 0\s+6\s+2\s+\d+\.\d\d s\s+\d+\.\d\d s\s*$", shown.stdout,
                         re.MULTILINE), shown.stdout
    as_json = json.loads(trainhub("status", str(job_id), "--json").stdout)
    assert [(s["pool"], s["state"], s["outer_step"], s["participants"]) for s in as_json["sites"]] == [
        ("lab-a", "finished", 6, 2), ("cloud-b", "finished", 6, 2)]
    assert all(s["bytes"] > 0 for s in as_json["sites"])
