"""DDP and DeepSpeed with two real ranks, launched by ``launch.argv`` through torchrun."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from tests.runner.conftest import command, run_job
from workers.runner.launch import FAST_TORCHRUN, RANK_LINE

pytestmark = pytest.mark.slow


def _spec(mode: str, **extra) -> dict:
    return {
        "name": f"{mode}-test", "mode": mode,
        "resources": {"procs_per_node": 2},
        "data": {"dataset": "digits", "batch_size": 32},
        "model": {"name": "mlp", "hidden": 64},
        "train": {"epochs": 2, "lr": 0.003, "seed": 0, "grad_accum_steps": 2, "max_grad_norm": 1.0,
                  "log_every_steps": 5},
        "checkpoint": {"every_steps": 10, "keep_last": 1},
        **extra,
    }


def _ranks_seen(stdout: str) -> set[int]:
    return {int(m.group(1)) for line in stdout.splitlines() if (m := RANK_LINE.match(line))}


def test_ddp_on_two_ranks_tags_every_line_with_its_rank_and_learns(tmp_path):
    result = run_job(_spec("ddp"), tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    assert _ranks_seen(result.stdout) == {0, 1}
    assert all(RANK_LINE.match(line) for line in result.stdout.splitlines() if line.strip())
    assert "[rank1]: rank 1/2 ready on cpu" in result.stdout
    assert result.of_type("start")[0]["world_size"] == 2
    assert result.metrics()[-1]["val_acc"] > 0.8


def test_ddp_writes_one_checkpoint_and_one_event_stream_from_rank_zero(tmp_path):
    result = run_job(_spec("ddp"), tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    assert len(result.of_type("start")) == 1 and len(result.of_type("end")) == 1
    [ckpt] = (result.run_dir / "checkpoints").iterdir()
    files = sorted(p.name for p in ckpt.iterdir())
    assert files == ["config.resolved.yaml", "rng-rank0.pt", "rng-rank1.pt", "state.pt"]
    assert all("[rank1]: checkpoint" not in line for line in result.stdout.splitlines())


def test_deepspeed_zero2_on_two_ranks_trains_and_every_rank_saves_its_shard(tmp_path):
    stage = 2
    spec = _spec("deepspeed", deepspeed={"zero_stage": stage, "overrides": {"zero_optimization": {
        "reduce_bucket_size": 500000}}})
    result = run_job(spec, tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    assert _ranks_seen(result.stdout) == {0, 1}
    assert result.metrics()[-1]["val_acc"] > 0.8
    resolved = json.loads((result.run_dir / "deepspeed.json").read_text())
    assert resolved["zero_optimization"] == {"stage": stage, "reduce_bucket_size": 500000}
    assert resolved["train_batch_size"] == 32 * 2 * 2
    [ckpt] = (result.run_dir / "checkpoints").iterdir()
    shards = sorted(p.name for p in (ckpt / "engine").glob("*optim_states.pt"))
    assert len(shards) == 2, shards
    weights = torch.load(result.run_dir / "model.pt")
    assert weights["0.weight"].shape == (64, 64)


def test_deepspeed_zero3_on_two_ranks_exports_full_weights_and_continues_from_its_shards(tmp_path):
    spec = _spec("deepspeed", deepspeed={"zero_stage": 3})
    spec["train"]["epochs"] = 1
    first = run_job(spec, tmp_path / "a", run_dir=tmp_path / "run")
    assert first.returncode == 0, first.stderr[-3000:]
    done = first.of_type("end")[-1]["step"]
    assert json.loads((first.run_dir / "deepspeed.json").read_text())["zero_optimization"]["stage"] == 3
    [ckpt] = (first.run_dir / "checkpoints").iterdir()
    assert len(list((ckpt / "engine").glob("*optim_states.pt"))) == 2, "one shard per rank"
    weights = torch.load(first.run_dir / "model.pt")
    assert weights["0.weight"].shape == (64, 64), "ZeRO-3 parameters are gathered for export"

    spec["train"]["epochs"] = 2  # the job is extended by one epoch and restarted
    second = run_job(spec, tmp_path / "b", run_dir=tmp_path / "run")

    assert second.returncode == 0, second.stderr[-3000:]
    assert second.of_type("start")[-1]["resumed_from"] == done
    assert second.of_type("end")[-1]["step"] == 2 * done
    assert second.metrics()[-1]["val_acc"] >= first.metrics()[-1]["val_acc"] - 0.02


def test_a_zero3_rank_leaves_no_engine_and_no_deepspeed_process_group_alive_after_teardown(tmp_path):
    # What a rank still holds when the interpreter exits is torn down in no fixed order, racing
    # the other rank's exit: the engine and DeepSpeed's own gloo group (its threads included)
    # once made a rank abort there ("terminate called without an active exception").
    spec = _spec("deepspeed", deepspeed={"zero_stage": 3})
    spec["train"].update(epochs=1, max_steps=4)
    argv, env, cwd, _ = command(spec, tmp_path)
    at = argv.index("-m", argv.index(str(FAST_TORCHRUN)) + 1)
    argv[at:at + 2] = [str(Path(__file__).with_name("leftovers.py"))]
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=240)

    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [json.loads(line.split("LEFTOVERS ", 1)[1]) for line in proc.stdout.splitlines() if "LEFTOVERS " in line]
    assert sorted(r["rank"] for r in reports) == ["0", "1"]
    for report in reports:
        assert report["engines"] == [], report
        # torch itself keeps the default group's two worker threads after destroy_process_group
        # (a DDP run too); a second group's would be DeepSpeed's clone of the world group
        assert report["gloo_threads"] <= 2, report
