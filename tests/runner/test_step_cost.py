"""The runner's own cost per optimizer step stays small (issue #12: progress and metric hooks,
accuracy, stop checks and ``.item()`` syncs under ~20 µs a step, or per log window).

Time, even CPU time, moves with the load of a shared machine; what the runner does per step does
not. So these count it: tensor operations (each one a dispatch, on a GPU a kernel launch),
host syncs (``.item()``/``float(tensor)``: on a GPU each waits for the device), and Python calls,
for the same optimizer steps through ``Runner`` and as a plain PyTorch loop, in this process.
"""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch.optim.lr_scheduler import LambdaLR
from torch.utils._python_dispatch import TorchDispatchMode

from workers import runner
from workers.runner.report import read_events
from workers.runner.train import LRSchedule, Runner, Scheduler, Window
from workers.runner.workloads import classify

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
    tmp.mkdir(parents=True, exist_ok=True)
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
    # today 2.9: a detach of the loss and of the logits each step, and the window's loss and accuracy summed
    # once every LOG_EVERY steps (stack, cat, argmax, eq, sum); 6.2 while the loss was added up and the
    # accuracy scored at every step, 8.2 while the loss was divided by grad_accum_steps = 1. A per-step
    # metric, a second accuracy or an unneeded scaling shows here.
    assert through_runner.per_step() - plain.per_step() <= 3.5, (through_runner.ops, plain.ops)


def test_the_runner_syncs_with_the_device_only_once_per_log_window(counts):
    through_runner, plain = counts
    extra_syncs = through_runner.per_step(SYNC) - plain.per_step(SYNC)
    # the window's loss and accuracy; a per-step .item() would add 1 a step
    assert extra_syncs <= 3 / LOG_EVERY, extra_syncs * STEPS


def test_the_runner_adds_few_python_calls_per_step(counts):
    through_runner, plain = counts
    extra = (through_runner.calls - plain.calls) / STEPS
    # today about 120 (Python and C calls, the counting mode's own included); 128 while a CPU batch went
    # through .to() and a constant learning rate was set again at every step; 222 while the loss and the
    # accuracy were summed at every step and torch's LambdaLR stepped the learning rate, 289 before the events
    # of a window went out in one write and the accuracy left torch.no_grad. A per-step event, print or
    # metric dict adds 40 or more.
    assert extra <= 150, extra


@pytest.mark.parametrize("small_parts", [False, True], ids=["whole-windows", "windows-scored-in-parts"])
def test_each_windows_training_loss_and_accuracy_are_those_of_its_batches(tmp_path, monkeypatch, small_parts):
    """The loss and accuracy are summed per log window, not per step; what the user sees for a window must
    still be the mean loss and the accuracy over exactly that window's batches, also when a long window is
    summed in parts to bound the memory it holds."""
    if small_parts:
        monkeypatch.setattr(classify, "HOLD_MAX", 3 * 8 * 10)  # the logits of 3 batches (8 rows, 10 classes)
        monkeypatch.setattr(Window, "FOLD", 4)
    steps = 4 * LOG_EVERY
    through_runner = make_runner(tmp_path / "runner", steps)
    through_runner._train()
    reported = [(e["step"], e["values"]["train_loss"], e["values"]["train_acc"])
                for e in read_events(through_runner.args.run_dir)[0] if e["type"] == "metrics"]

    plain = make_runner(tmp_path / "plain", steps)  # the same weights and batches (both seeded)
    model, optimizer = plain.model, plain.strategy.optimizer
    expected, losses, correct, seen = [], [], 0, 0
    for step, (x, y) in enumerate(itertools.islice(iter(plain.train_loader), steps), start=1):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        losses.append(loss.item())
        correct, seen = correct + int((logits.argmax(-1) == y).sum()), seen + len(y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % LOG_EVERY == 0:
            expected.append((step, sum(losses) / len(losses), correct / seen))
            losses, correct, seen = [], 0, 0

    assert [r[0] for r in reported] == [e[0] for e in expected]
    for (step, loss, acc), (_, want_loss, want_acc) in zip(reported, expected):
        assert loss == pytest.approx(want_loss, rel=1e-5), step
        assert acc == pytest.approx(want_acc), step
    assert len({acc for _, _, acc in reported}) > 1  # the accuracy moves: windows are not all alike


@pytest.mark.parametrize("kind", ["constant", "cosine", "linear"])
def test_the_learning_rate_follows_the_schedule_as_torchs_lambda_scheduler_would(kind):
    """The runner's lighter scheduler step sets the same rates and keeps the same state (so checkpoints
    resume alike) as torch's LambdaLR, warm-up included."""
    train = type("Train", (), {"scheduler": kind, "warmup_steps": 5})
    ours, torchs = (torch.optim.AdamW(torch.nn.Linear(2, 2).parameters(), lr=0.1) for _ in range(2))
    scheduler, reference = Scheduler(ours, LRSchedule(train, 50)), LambdaLR(torchs, LRSchedule(train, 50))
    seen = set()
    for step in range(60):
        ours.step(), torchs.step(), scheduler.step(), reference.step()
        assert ours.param_groups[0]["lr"] == torchs.param_groups[0]["lr"], step
        assert scheduler.get_last_lr() == reference.get_last_lr(), step
        seen.add(ours.param_groups[0]["lr"])
    assert scheduler.state_dict() == reference.state_dict()
    assert len(seen) > (1 if kind == "constant" else 40)  # warm-up, then the decay: the rate really moves


def test_a_cpu_batch_keeps_its_tensors_and_only_floats_of_another_precision_are_cast():
    """The CPU run's batches skip .to(); what the model receives must still be the batch it would get after
    a move: float32 inputs as they are, float64 cast to the strategy's dtype, integer labels untouched."""
    from workers.runner.train import to_device

    x, y, wide = torch.randn(4, 3), torch.arange(4), torch.randn(4, 3, dtype=torch.float64)
    moved = to_device({"x": x, "pair": (wide, y)}, torch.device("cpu"), torch.float32)
    assert moved["x"] is x and moved["pair"][1] is y
    assert moved["pair"][0].dtype == torch.float32 and torch.allclose(moved["pair"][0], wide.float())
    assert isinstance(moved["pair"], tuple)
    assert to_device(x, torch.device("cpu"), torch.bfloat16).dtype == torch.bfloat16
