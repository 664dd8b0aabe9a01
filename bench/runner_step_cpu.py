"""The runner's per-step cost in CPU time: the same optimizer steps (same model, optimizer,
batches) once through ``Runner`` with every hook (progress and metric windows, accuracy, stop
checks, scheduler, events file) and once as a plain PyTorch loop, in one process, one thread.
CPU time of this process (``time.process_time``), not wall time: it holds on a loaded machine.

    .venv/bin/python bench/runner_step_cpu.py [--steps 4000] [--repeats 5] [--profile]

A tiny model (logistic regression on digits, batch 8) keeps the training itself cheap, so the
hooks show. Raw samples to bench/results/ (bench/record.py).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench import record  # noqa: E402
from workers import runner  # noqa: E402
from workers.runner.train import Runner  # noqa: E402


def make(tmp: Path, steps: int, model: str, batch: int, log_every: int) -> Runner:
    import yaml

    spec = {"name": "step-cpu", "data": {"dataset": "digits", "batch_size": batch},
            "model": {"name": model, "hidden": 32, "layers": 1},
            "train": {"epochs": 100_000, "max_steps": steps, "log_every_steps": log_every, "eval_every_steps": 10**6},
            "checkpoint": {"every_steps": 0, "keep_last": 1, "resume": False}}
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "job.yaml").write_text(yaml.safe_dump(spec))
    args = runner.load_arguments(str(tmp / "job.yaml"), run_dir=str(tmp / "run"))
    args.run_dir.mkdir(parents=True, exist_ok=True)
    dataset = runner.data.load(args)
    return Runner(args, torch.device("cpu"), dataset, runner.model.create(args, dataset.output_dim))


def runner_steps(tmp: Path, steps: int, model: str, batch: int, log_every: int, profile=None) -> float:
    """CPU seconds of ``steps`` optimizer steps through the runner's loop (its setup excluded;
    the final evaluation and ``finish`` are stubbed out, they are not per step)."""
    r = make(tmp, steps, model, batch, log_every)
    r._checkpoint = lambda: None
    r.workload.finish = lambda model, is_main: []
    r._evaluate = lambda: {}
    r.saved_step = 10**9
    if profile:
        profile.enable()
    started = time.process_time()
    r._train()
    if profile:
        profile.disable()
    assert r.step == steps, r.step
    return time.process_time() - started


def bare_steps(tmp: Path, steps: int, model: str, batch: int) -> float:
    """CPU seconds of the same steps as a plain loop: forward, loss, backward, step, zero_grad."""
    r = make(tmp, steps, model, batch, 10)
    m, opt, loader = r.model, r.strategy.optimizer, r.train_loader
    done = 0
    started = time.process_time()
    while done < steps:
        for x, y in loader:
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done == steps:
                break
    return time.process_time() - started


def window_events_us(tmp: Path, windows: int = 20000) -> dict[str, float]:
    """CPU µs to write one log window's events, as two events (progress, metrics: a fence read and a
    flush each) and as ``Reporter.window`` (one of each); the fence on, as under a worker. Min of 3."""
    import os

    from workers.runner import fence
    from workers.runner.report import Reporter

    tmp.mkdir(parents=True, exist_ok=True)
    fence.claim(tmp, 1)
    os.environ["TRAINHUB_ATTEMPT"] = "1"
    rep = Reporter(tmp)
    values = {"train_loss": 0.5, "train_acc": 0.9, "lr": 0.001, "samples_per_s": 1234.5}
    ways = {"two_events": lambda i: (rep.progress(i, windows, 0), rep.metrics(i, **values)),
            "window": lambda i: rep.window(i, windows, 0, values)}
    out = {}
    for name, write in ways.items():
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            for i in range(windows):
                write(i)
            best = min(best, (time.process_time() - started) / windows * 1e6)
        out[name] = best
    os.environ.pop("TRAINHUB_ATTEMPT")
    rep.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", default="logreg")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--profile", action="store_true", help="cProfile one runner pass instead")
    ns = parser.parse_args()
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="trainhub-step-"))
    if ns.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile(time.process_time)
        runner_steps(tmp / "p", ns.steps, ns.model, ns.batch, ns.log_every, prof)
        pstats.Stats(prof).sort_stats("cumtime").print_stats("runner|json|print|report", 40)
        return
    bare_step = runner_step = [0.0]  # warm-up (first-call costs of torch)
    runner_steps(tmp / "w", 200, ns.model, ns.batch, ns.log_every)
    bare_steps(tmp / "w", 200, ns.model, ns.batch)
    bare_step, runner_step = [], []
    for i in range(ns.repeats):
        bare_step.append(bare_steps(tmp / f"b{i}", ns.steps, ns.model, ns.batch) / ns.steps * 1e6)
        runner_step.append(runner_steps(tmp / f"r{i}", ns.steps, ns.model, ns.batch, ns.log_every) / ns.steps * 1e6)
    extra = [r - b for r, b in zip(runner_step, bare_step)]
    events = window_events_us(tmp / "events")
    print(f"one log window's events: {events}", file=sys.stderr)
    print(f"{ns.model}, batch {ns.batch}, log every {ns.log_every} steps, {ns.steps} steps × {ns.repeats}, "
          f"CPU µs per step (median): bare {statistics.median(bare_step):.1f}, runner "
          f"{statistics.median(runner_step):.1f}, runner's own {statistics.median(extra):.1f} "
          f"(min bare {min(bare_step):.1f}, min runner {min(runner_step):.1f})")
    record.write("runner_step_cpu", {
        "model": ns.model, "batch": ns.batch, "log_every_steps": ns.log_every, "steps": ns.steps,
        "unit": "CPU microseconds per optimizer step (time.process_time, one thread)",
        "bare_us": bare_step, "runner_us": runner_step, "runner_own_us": extra,
        "median_runner_own_us": statistics.median(extra),
        "min_runner_minus_min_bare_us": min(runner_step) - min(bare_step),
        "window_events_cpu_us": events})


if __name__ == "__main__":
    main()
