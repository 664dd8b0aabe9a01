"""Resume: a run continued from a mid-run checkpoint ends exactly where an uninterrupted one does."""
from __future__ import annotations

import shutil

import pytest
import torch

from tests.runner.conftest import run_job

pytestmark = pytest.mark.slow


def test_a_run_resumed_from_a_mid_run_checkpoint_ends_with_identical_weights_and_loss(tmp_path):
    spec = {
        "name": "resume",
        "data": {"dataset": "digits", "batch_size": 32},
        "model": {"name": "mlp", "hidden": 32},
        "train": {"epochs": 2, "lr": 0.003, "seed": 1, "grad_accum_steps": 2, "max_grad_norm": 1.0,
                  "scheduler": "cosine", "warmup_steps": 5, "log_every_steps": 5},
        "checkpoint": {"every_steps": 10, "keep_last": 10},
    }
    whole = run_job(spec, tmp_path / "a", run_dir=tmp_path / "a" / "run")
    assert whole.returncode == 0, whole.stderr
    steps_per_epoch = whole.of_type("start")[0]["steps_per_epoch"]
    assert 10 < steps_per_epoch < 30, "step 30 must fall inside the second epoch"

    # a run that was stopped at step 30: its run dir holds only what existed then
    resumed_dir = tmp_path / "b" / "run"
    shutil.copytree(whole.run_dir / "checkpoints" / "step-30", resumed_dir / "checkpoints" / "step-30")
    resumed = run_job(spec, tmp_path / "b", run_dir=resumed_dir)

    assert resumed.returncode == 0, resumed.stderr
    assert resumed.of_type("resume")[0]["step"] == 30
    assert resumed.of_type("start")[0]["resumed_from"] == 30
    assert "resumed at step 30" in resumed.stdout
    assert resumed.metrics()[-1]["val_loss"] == whole.metrics()[-1]["val_loss"]
    assert resumed.metrics()[-1]["train_loss"] == whole.metrics()[-1]["train_loss"]
    a, b = torch.load(whole.run_dir / "model.pt"), torch.load(resumed_dir / "model.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_half_written_checkpoint_is_never_resumed_from(tmp_path, digits_spec):
    digits_spec["train"].update(epochs=1)
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / ".tmp-step-999").mkdir(parents=True)  # a crash mid-write
    result = run_job(digits_spec, tmp_path, run_dir=run_dir)

    assert result.returncode == 0, result.stderr
    assert result.of_type("start")[0]["resumed_from"] is None


class _RunsCode:
    """Pickles as a call to ``exec``: loading it with ``weights_only=False`` would run the code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('pwned')",)


@pytest.mark.parametrize("victim", ["state.pt", "rng-rank0.pt"])
def test_a_checkpoint_file_holding_a_pickle_that_runs_code_is_refused_on_resume(tmp_path, digits_spec, victim):
    digits_spec["train"].update(epochs=1)
    run_dir = tmp_path / "run"
    first = run_job(digits_spec, tmp_path, run_dir=run_dir)
    assert first.returncode == 0, first.stderr
    [ckpt] = [p for p in (run_dir / "checkpoints").iterdir() if p.name == f"step-{first.of_type('end')[-1]['step']}"]
    marker = tmp_path / "pwned"
    # e.g. a file of another job's checkpoint, copied here by checkpoint.start_from
    torch.save({"model": _RunsCode(marker), "state": {"step": 1}}, ckpt / victim)

    resumed = run_job(digits_spec, tmp_path, run_dir=run_dir)

    assert resumed.returncode == 1
    assert "holds objects other than tensors and plain values" in resumed.stderr
    assert "checkpoint.resume: false" in resumed.stderr
    assert not marker.exists(), "the pickle ran code"


def _small_run(tmp_path, name, **checkpoint):
    spec = {"name": name, "data": {"dataset": "iris", "batch_size": 16}, "model": {"name": "logreg"},
            "train": {"epochs": 1, "log_every_steps": 1}, "checkpoint": {"every_steps": 2, **checkpoint}}
    return spec, run_job(spec, tmp_path / name, run_dir=tmp_path / name / "run")


def test_the_bare_runner_says_it_ignores_checkpoint_start_from(tmp_path):
    _, result = _small_run(tmp_path, "bare", start_from="job-7/checkpoints/step-2")
    assert result.returncode == 0, result.stderr
    assert "checkpoint.start_from (job-7/checkpoints/step-2) is ignored here" in result.stdout
    assert result.of_type("start")[0]["resumed_from"] is None


def test_starting_from_a_checkpoint_at_the_last_step_is_refused_not_a_silent_success(tmp_path):
    spec, whole = _small_run(tmp_path, "whole")
    assert whole.returncode == 0, whole.stderr
    last = whole.of_type("start")[0]["total_steps"]
    # what a worker does for start_from: the other job's checkpoint copied into this run's directory
    run_dir = tmp_path / "again" / "run"
    shutil.copytree(whole.run_dir / "checkpoints" / f"step-{last}", run_dir / "checkpoints" / f"step-{last}")
    spec["checkpoint"]["start_from"] = f"job-1/checkpoints/step-{last}"
    again = run_job(spec, tmp_path / "again", run_dir=run_dir)
    assert again.returncode == 2, again.stdout
    assert f"spec error: checkpoint.start_from: job-1/checkpoints/step-{last} is at step {last}" in again.stderr
    assert "raise train.epochs" in again.stderr
