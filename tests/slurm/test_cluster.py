"""The test cluster itself: two nodes that run one batch job's steps."""
from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.no_db]


def test_a_two_node_batch_job_runs_one_task_on_each_node(slurm_cluster_handle, tmp_path):
    cluster = slurm_cluster_handle
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsrun --ntasks-per-node=1 bash -c 'echo on $SLURMD_NODENAME'\n")
    out = tmp_path / "out.txt"
    job = cluster.run("sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=1", f"--output={out}",
                      f"--chdir={tmp_path}", str(script)).strip()
    deadline = time.monotonic() + 60
    while cluster.run("squeue", "-h", "-j", job, check=False).strip():
        assert time.monotonic() < deadline, f"job {job} did not finish"
        time.sleep(0.5)
    assert sorted(out.read_text().split("\n")[:2]) == ["on n1", "on n2"]
    assert "JobState=COMPLETED" in cluster.run("scontrol", "show", "job", job)
