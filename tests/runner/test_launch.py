"""The commands the executor starts: argv lists, environment, rank-tagged output."""
from __future__ import annotations

import sys

import pytest

from workers.runner import launch
from workers.runner.config import parse_spec


def test_a_centralized_job_is_one_python_process_of_the_runner(tmp_path):
    spec = parse_spec({"mode": "centralized"})
    argv = launch.argv(spec, tmp_path / "job.yaml", tmp_path / "run")

    assert argv == [sys.executable, "-m", "workers.runner", "--config", str((tmp_path / "job.yaml").resolve()),
                    "--run-dir", str((tmp_path / "run").resolve())]


@pytest.mark.parametrize("mode", ["ddp", "deepspeed"])
def test_multi_process_jobs_go_through_torchrun_with_every_line_tagged(tmp_path, mode):
    spec = parse_spec({"mode": mode, "resources": {"procs_per_node": 4}})
    argv = launch.argv(spec, "job.yaml", tmp_path)
    env = launch.env(spec, tmp_path, base={})

    assert argv[1] == str(launch.FAST_TORCHRUN)  # torchrun, leaving without its interpreter's teardown
    assert argv[argv.index("--nproc-per-node") + 1] == "4"
    assert argv[argv.index("--tee") + 1] == "3"
    assert argv[-6:-4] == ["-m", "workers.runner"]
    assert env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]: "
    assert launch.RANK_LINE.match("[rank3]: epoch 1/3").group(1) == "3"


def test_a_multi_node_job_joins_the_c10d_rendezvous_of_its_endpoint(tmp_path):
    spec = parse_spec({"mode": "ddp", "resources": {"nodes": 2, "procs_per_node": 2}})
    argv = launch.argv(spec, "job.yaml", tmp_path, node_rank=1, rdzv_endpoint="10.0.0.5:29400", rdzv_id="job-7")

    assert "--standalone" not in argv
    for flag, value in [("--nnodes", "2"), ("--node-rank", "1"), ("--rdzv-backend", "c10d"),
                        ("--rdzv-endpoint", "10.0.0.5:29400"), ("--rdzv-id", "job-7")]:
        assert argv[argv.index(flag) + 1] == value
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        launch.argv(spec, "job.yaml", tmp_path)


def test_the_environment_is_unbuffered_offline_and_cpu_deepspeed_knows_its_accelerator(tmp_path):
    spec = parse_spec({"mode": "deepspeed"})
    env = launch.env(spec, tmp_path, base={"PYTHONPATH": "/extra"})

    assert env["PYTHONUNBUFFERED"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert env["DS_ACCELERATOR"] == "cpu"
    assert env["PYTHONPATH"].endswith("/extra") and str(launch.REPO_ROOT) in env["PYTHONPATH"]
    assert env["TORCH_EXTENSIONS_DIR"].endswith("trainhub/torch_extensions")
    assert launch.env(spec, tmp_path, base={"TORCH_EXTENSIONS_DIR": "/x"})["TORCH_EXTENSIONS_DIR"] == "/x"
