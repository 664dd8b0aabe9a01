"""A centralized run on the bundled digits, as a user starts it: ``python -m workers.runner``."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from tests.runner.conftest import ROOT, run_job, run_module, write_spec

pytestmark = pytest.mark.slow


def test_a_digits_mlp_learns_far_above_chance_in_three_epochs(tmp_path, digits_spec):
    result = run_job(digits_spec, tmp_path)

    assert result.returncode == 0, result.stderr
    evals = [m for m in result.metrics() if "val_acc" in m]
    assert len(evals) == 3, "one evaluation per epoch"
    assert evals[-1]["val_acc"] > 0.85  # chance is 0.1
    losses = [m["train_loss"] for m in result.metrics()]
    assert losses[-1] < losses[0] / 3
    assert re.search(r"^epoch 3/3 step \d+/\d+ train_loss=\S+ .*val_loss=\S+ val_acc=\S+$", result.stdout, re.M)


def test_a_run_leaves_its_config_events_checkpoints_and_model_in_the_run_dir(tmp_path, digits_spec):
    result = run_job(digits_spec, tmp_path)

    assert result.returncode == 0, result.stderr
    run = result.run_dir
    assert "dataset: digits" in (run / "config.resolved.yaml").read_text()
    kinds = [e["type"] for e in result.events]
    assert kinds[0] == "start" and kinds[-1] == "end"
    assert {"progress", "metrics", "checkpoint", "artifact"} <= set(kinds)
    assert result.events[-1]["status"] == "succeeded"
    kept = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert len(kept) == 2, "keep_last: 2"
    assert all((run / "checkpoints" / name / "config.resolved.yaml").exists() for name in kept)
    weights = torch.load(run / "model.pt")
    assert weights["0.weight"].shape == (64, 64)


@pytest.mark.parametrize("model", ["cnn", "logreg"])
def test_cnn_and_logreg_also_learn_digits(tmp_path, digits_spec, model):
    digits_spec["model"] = {"name": model}
    digits_spec["train"].update(epochs=2, lr=0.01, optimizer="adam", scheduler="cosine", warmup_steps=3)
    result = run_job(digits_spec, tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.metrics()[-1]["val_acc"] > 0.8


def test_the_runner_imports_neither_django_nor_celery(tmp_path, digits_spec):
    digits_spec["train"].update(epochs=1, max_steps=3)
    config = write_spec(tmp_path, digits_spec)
    probe = tmp_path / "probe.py"
    probe.write_text(  # the runner leaves through os._exit (fastexit.py), after running atexit handlers
        "import atexit, sys, runpy\n"
        "atexit.register(lambda: print('IMPORTED', sorted(m for m in sys.modules\n"
        "                                                 if m.split('.')[0] in ('django', 'celery', 'trainhub'))))\n"
        f"sys.argv = ['workers.runner', '--config', {str(config)!r}, '--run-dir', {str(tmp_path / 'run')!r}]\n"
        "runpy.run_module('workers.runner', run_name='__main__')\n")

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(probe)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "IMPORTED []" in out.stdout, out.stdout + out.stderr


def test_an_invalid_spec_exits_2_naming_the_field_and_the_fix(tmp_path):
    config = write_spec(tmp_path, {"data": {"dataset": "iris"}, "model": {"name": "cnn"}})
    out = run_module(["--config", str(config), "--run-dir", str(tmp_path / "run")], tmp_path)

    assert out.returncode == 2
    assert "spec error: model.name: cnn needs image-shaped data" in out.stderr


def test_a_job_that_cannot_start_training_says_why_and_still_ends_its_event_stream(tmp_path, digits_spec):
    digits_spec["data"]["batch_size"] = 2048  # one partial batch of the 1438 training rows...
    digits_spec["train"]["grad_accum_steps"] = 2  # ...cannot make a step of two
    result = run_job(digits_spec, tmp_path)

    assert result.returncode == 1
    assert "lower them or use fewer ranks" in result.stderr
    [end] = result.of_type("end")
    assert end["status"] == "failed" and "batch_size" in end["reason"]
