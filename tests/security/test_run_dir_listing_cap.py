"""Listing a run directory (the files API, the job page) costs the web server a bounded walk however the
job shaped its tree: ten thousands of empty folders, or folders nested hundreds deep, are not walked in
full — the walk stops at its cap of entries looked at and its depth, and lists what it saw."""
from __future__ import annotations

import os

import pytest


@pytest.fixture
def job_dir(user, cpu_pool, live_settings):
    from trainhub.jobs.models import Job
    from trainhub.jobs.rundir import run_dir

    job = Job.submit(owner=user, name="trees", mode="script", spec={"name": "trees"}, pool=cpu_pool)
    folder = run_dir(job.pk)
    folder.mkdir(parents=True)
    return job, folder


def listed(client, job) -> list[str]:
    response = client.get(f"/api/jobs/{job.pk}/artifacts")
    assert response.status_code == 200, response.content
    return [a["path"] for a in response.json()]


def test_a_forest_of_empty_folders_is_not_walked_in_full(user_client, job_dir):
    from trainhub.jobs import runfiles

    job, folder = job_dir
    (folder / "first.txt").write_text("listed")
    for i in range(3000):  # 33,000 entries with no file in them, more than the walk looks at
        for j in range(10):
            os.makedirs(folder / f"a{i:04d}" / f"b{j}")
    (folder / "zz").mkdir()
    (folder / "zz" / "last.txt").write_text("beyond the cap")
    opened = []
    real = runfiles._open_dir_at
    runfiles._open_dir_at = lambda fd, name: opened.append(name) or real(fd, name)
    try:
        paths = listed(user_client, job)
    finally:
        runfiles._open_dir_at = real
    assert "first.txt" in paths and "zz/last.txt" not in paths
    assert len(opened) < runfiles.MAX_EXAMINED  # not 33,000 folders opened


def test_folders_nested_past_the_depth_cap_are_not_entered(user_client, job_dir):
    job, folder = job_dir
    deep = folder / "/".join(["d"] * 100)
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_text("100 folders down")
    (folder / "d" / "top.txt").write_text("one folder down")
    paths = listed(user_client, job)
    assert "d/top.txt" in paths and not any(p.endswith("bottom.txt") for p in paths)
