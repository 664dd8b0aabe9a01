"""Runner overhead: the same centralized training as a bare PyTorch script and through
``python -m workers.runner`` (wall-clock ratio), and the per-step cost of the event hooks.

    .venv/bin/python bench/runner_overhead.py [--samples 20000] [--epochs 3] [--repeats 3]

Prints a Markdown table. Both sides run in fresh processes (imports included), on CPU,
one thread each, on the same generated data, model, optimizer and batch order.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import bare  # noqa: E402

BARE = bare.SYNTHETIC  # the same training, by hand (bench/bare.py)


def timed(argv: list[str], cwd: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def runner_argv(tmp: Path, tag: str, samples: int, epochs: int, batch: int, log_every: int) -> list[str]:
    spec = {"name": f"bench-{tag}", "data": {"dataset": "synthetic", "samples": samples, "batch_size": batch},
            "model": {"name": "mlp", "hidden": 128, "layers": 2},
            "train": {"epochs": epochs, "lr": 1e-3, "log_every_steps": log_every},
            "checkpoint": {"every_steps": 0, "keep_last": 1}}
    config = tmp / f"{tag}.yaml"
    config.write_text(yaml.safe_dump(spec))
    return [sys.executable, "-m", "workers.runner", "--config", str(config), "--run-dir", str(tmp / f"run-{tag}")]


def hook_cost(tmp: Path, calls: int = 20000) -> float:
    """Microseconds for one logged step's events (progress + metrics line) on the main rank."""
    from workers.runner.report import Reporter

    rep = Reporter(tmp)
    started = time.perf_counter()
    for step in range(calls):
        rep.progress(step, calls, 0)
        rep.metrics(step, train_loss=1.0, lr=1e-3, samples_per_s=1000.0)
    rep.close()
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    ns = parser.parse_args()
    steps = ns.epochs * -(-int(ns.samples * 0.8) // ns.batch)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        (tmp / "bare.py").write_text(BARE)
        bare, quiet, chatty = [], [], []
        for i in range(ns.repeats):
            bare.append(timed([sys.executable, str(tmp / "bare.py"), str(ns.samples), str(ns.epochs), str(ns.batch)], tmp))
            quiet.append(timed(runner_argv(tmp, f"q{i}", ns.samples, ns.epochs, ns.batch, 10**6), tmp))
            chatty.append(timed(runner_argv(tmp, f"c{i}", ns.samples, ns.epochs, ns.batch, 1), tmp))
        hook_us = hook_cost(tmp)
    b, q, c = (statistics.median(v) for v in (bare, quiet, chatty))
    print(f"centralized MLP on synthetic ({ns.samples} rows, batch {ns.batch}, {ns.epochs} epochs, "
          f"{steps} steps), median of {ns.repeats}, 1 CPU thread\n")
    print("| measurement | value |")
    print("| --- | --- |")
    print(f"| bare PyTorch script, wall | {b:.2f} s |")
    print(f"| `python -m workers.runner` (log every epoch), wall | {q:.2f} s |")
    print(f"| runner / bare wall ratio | {q / b:.2f}x |")
    print(f"| runner logging every step, wall | {c:.2f} s |")
    per_step = (c - q) / steps * 1e3
    shown = f"{per_step:.3f} ms" if per_step > 0 else f"below run-to-run noise ({per_step:.3f} ms)"
    print(f"| per-step cost of logging + events (from the two runner runs) | {shown} |")
    print(f"| event hooks alone (progress + metrics lines), per call | {hook_us:.1f} µs |")


if __name__ == "__main__":
    main()
