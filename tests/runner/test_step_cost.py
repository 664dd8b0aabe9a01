"""The runner's own cost per optimizer step stays small (issue #12: progress and metric hooks,
accuracy, stop checks and ``.item()`` syncs under ~20 µs a step, or per log window).

Time, even CPU time, moves with the load of a shared machine; what the runner does per step does
not. So these count it: tensor operations (each one a dispatch, on a GPU a kernel launch),
host syncs (``.item()``/``float(tensor)``: on a GPU each waits for the device), and Python calls,
for the same optimizer steps through ``Runner`` and as a plain PyTorch loop, in this process.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

from workers import runner
from workers.runner.train import Runner

STEPS, LOG_EVERY = 200, 10
SYNC = "aten._local_scalar_dense.default"


class Count(TorchDispatchMode):
    """Tensor operations dispatched while active, and Python calls (``sys.setprofile``)."""

    def __init__(self):
        super().__init__()
        self.ops: dict[str, int] = {}
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] = self.ops.get(str(func), 0) + 1
        return func(*args, **(kwargs or {}))

    def _profile(self, frame, event, arg):
        if event in ("call", "c_call"):
            self.calls += 1

    def __enter__(self):
        sys.setprofile(self._profile)
        return super().__enter__()

    def __exit__(self, *exc):
        sys.setprofile(None)
        return super().__exit__(*exc)

    def per_step(self, op: str | None = None) -> float:
        return (self.ops.get(op, 0) if op else sum(self.ops.values())) / STEPS


def make_runner(tmp: Path, steps: int = STEPS) -> Runner:
    spec = {"name": "step-cost", "data": {"dataset": "digits", "batch_size": 8}, "model": {"name": "logreg"},
            "train": {"epochs": 1000, "max_steps": steps, "log_every_steps": LOG_EVERY, "eval_every_steps": 10**6},
            "checkpoint": {"every_steps": 0, "resume": False}}
    (tmp / "job.yaml").write_text(yaml.safe_dump(spec))
    args = runner.load_arguments(str(tmp / "job.yaml"), run_dir=str(tmp / "run"))
    args.run_dir.mkdir(parents=True)
    dataset = runner.data.load(args)
    r = Runner(args, torch.device("cpu"), dataset, runner.model.create(args, dataset.output_dim))
    r._checkpoint = r._evaluate = lambda: {}  # the end of the run is not per step
    r.workload.finish = lambda model, is_main: []
    r.saved_step = 10**9
    return r


@pytest.fixture(scope="module")
def counts(tmp_path_factory) -> tuple[Count, Count]:
    # first-call costs (lazy imports, the optimizer's state) are not per step
    make_runner(tmp_path_factory.mktemp("warm-up"), steps=LOG_EVERY)._train()
    through_runner = make_runner(tmp_path_factory.mktemp("runner"))
    with Count() as runner_count:
        through_runner._train()
    assert through_runner.step == STEPS

    plain = make_runner(tmp_path_factory.mktemp("plain"))
    model, optimizer, loader = plain.model, plain.strategy.optimizer, plain.train_loader
    batches = iter(())
    with Count() as plain_count:
        for _ in range(STEPS):
            try:
                x, y = next(batches)
            except StopIteration:
                batches = iter(loader)
                x, y = next(batches)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return runner_count, plain_count


def test_the_runner_adds_few_tensor_operations_per_step(counts):
    through_runner, plain = counts
    # today 6.2: the window's loss (detach, add) and the training accuracy (argmax, eq, sum, add) each step,
    # the window's metrics every LOG_EVERY steps; 8.2 while the loss was divided by grad_accum_steps = 1.
    # A per-step metric, a second accuracy or an unneeded scaling shows here.
    assert through_runner.per_step() - plain.per_step() <= 7, (through_runner.ops, plain.ops)


def test_the_runner_syncs_with_the_device_only_once_per_log_window(counts):
    through_runner, plain = counts
    extra_syncs = through_runner.per_step(SYNC) - plain.per_step(SYNC)
    # the window's loss and accuracy; a per-step .item() would add 1 a step
    assert extra_syncs <= 3 / LOG_EVERY, extra_syncs * STEPS


def test_the_runner_adds_few_python_calls_per_step(counts):
    through_runner, plain = counts
    extra = (through_runner.calls - plain.calls) / STEPS
    # today about 222 (Python and C calls, the counting mode's own included; 289 before the events of a
    # window went out in one write and the accuracy left torch.no_grad). A per-step event, print or metric
    # dict adds 40 or more.
    assert extra <= 260, extra
