"""What the bubblewrap sandbox (``workers.sandbox``) costs: per job start and per training step.

    .venv/bin/python bench/sandbox_cost.py [--starts 9] [--runs 5] [--samples 20000] [--epochs 2]
        [--dataset synthetic|digits] [--threads 1|0]

Start: ``python -c pass`` bare and under the sandbox's bwrap argv (the same argv the local backend
builds), interleaved, median of ``--starts``. Step: the same short classify run through
``python -m workers.runner`` bare and sandboxed, interleaved, median of ``--runs``; the seconds per
step come from the run's own events (first ``start`` to last ``progress``), so process start-up is
not counted twice. ``--dataset digits`` runs the default form's job instead (sklearn's digits, the
MLP, batch 64, a log window every 10 steps); ``--threads 0`` leaves OMP_NUM_THREADS unset, as the
executor does (torch then takes one thread per core). Prints a Markdown table and writes the raw
samples with ``bench/record.py``.
"""
from __future__ import annotations

import argparse
import json
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
# the sandbox's argv reads the worker's settings (the size of the job's /tmp), as under a worker
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")

from bench import record  # noqa: E402
from workers import sandbox  # noqa: E402


def job_env(threads: int) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env.pop("OMP_NUM_THREADS", None)
    return {**env, "OMP_NUM_THREADS": str(threads)} if threads else env


def sandbox_prefix(run_dir: Path, threads: int = 1) -> list[str]:
    env = {**job_env(threads), "TRAINHUB_RUN_DIR": str(run_dir)}
    plan = sandbox.Plan(run_dir=run_dir, cwd=run_dir, project=ROOT, env=env, hidden=(run_dir.parent, ROOT / "var"),
                        pythons=sandbox.python_roots())
    return sandbox.argv(plan)


def timed(argv: list[str], cwd: Path, threads: int = 1) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=job_env(threads), check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def start_cost(tmp: Path, n: int) -> dict:
    run_dir = tmp / "runs" / "job-start"
    run_dir.mkdir(parents=True)
    bare, boxed = [], []
    for _ in range(n):
        bare.append(timed([sys.executable, "-c", "pass"], run_dir))
        boxed.append(timed(sandbox_prefix(run_dir) + [sys.executable, "-c", "pass"], run_dir))
    return {"bare_s": bare, "sandboxed_s": boxed,
            "median_extra_ms": (statistics.median(boxed) - statistics.median(bare)) * 1000}


def step_seconds(run_dir: Path) -> float:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    start = next(e for e in events if e["type"] == "start")
    last = [e for e in events if e["type"] == "progress"][-1]
    return (last["time"] - start["time"]) / last["step"]


def step_cost(tmp: Path, n: int, samples: int, epochs: int, dataset: str = "synthetic", threads: int = 1) -> dict:
    if dataset == "digits":  # the default form's job, as a user submits it
        spec = {"name": "bench-sandbox", "mode": "centralized", "data": {"dataset": "digits"},
                "model": {"name": "mlp"}, "train": {"epochs": epochs}}
    else:
        spec = {"name": "bench-sandbox", "data": {"dataset": "synthetic", "samples": samples, "batch_size": 64},
                "model": {"name": "mlp", "hidden": 128, "layers": 2},
                "train": {"epochs": epochs, "lr": 1e-3, "log_every_steps": 50},
                "checkpoint": {"every_steps": 0, "keep_last": 1}}
    samples_s: dict[str, list[float]] = {"bare": [], "sandboxed": []}
    for i in range(n):
        # which goes first alternates: a drift of the machine's speed then falls on both alike
        for kind in ("bare", "sandboxed") if i % 2 == 0 else ("sandboxed", "bare"):
            run_dir = tmp / "runs" / f"job-{kind}-{i}"
            run_dir.mkdir(parents=True)
            config = run_dir / "job.yaml"  # inside the run dir: the sandbox shows nothing else of tmp
            config.write_text(yaml.safe_dump(spec))
            argv = [sys.executable, "-m", "workers.runner", "--config", str(config), "--run-dir", str(run_dir)]
            if kind == "sandboxed":
                argv = sandbox_prefix(run_dir, threads) + argv
            timed(argv, run_dir, threads)
            samples_s[kind].append(step_seconds(run_dir))
    bare, boxed = statistics.median(samples_s["bare"]), statistics.median(samples_s["sandboxed"])
    return {"bare_step_s": samples_s["bare"], "sandboxed_step_s": samples_s["sandboxed"],
            "median_extra_percent": (boxed - bare) / bare * 100}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=9)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--dataset", choices=["synthetic", "digits"], default="synthetic")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the job; 0: unset (the executor's)")
    args = parser.parse_args()
    if not sandbox.available():
        sys.exit("bench/sandbox_cost.py needs bubblewrap: apt-get install bubblewrap")
    # under /var/tmp, not /tmp: the sandbox lays its own /tmp over /tmp
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-", dir="/var/tmp") as name:
        tmp = Path(name)
        start = start_cost(tmp, args.starts)
        step = step_cost(tmp, args.runs, args.samples, args.epochs, args.dataset, args.threads)
    result = {"start": start, "step": step, "args": vars(args)}
    path = record.write("sandbox_cost", result)
    print("| what | bare (median) | sandboxed (median) | cost | target |\n| --- | --- | --- | --- | --- |")
    print(f"| job start (`python -c pass`, n={args.starts}) | {statistics.median(start['bare_s']) * 1000:.0f} ms | "
          f"{statistics.median(start['sandboxed_s']) * 1000:.0f} ms | {start['median_extra_ms']:+.0f} ms | ≤ 50 ms |")
    print(f"| training step ({args.dataset} mlp, batch 64, n={args.runs} interleaved) | "
          f"{statistics.median(step['bare_step_s']) * 1000:.2f} ms | "
          f"{statistics.median(step['sandboxed_step_s']) * 1000:.2f} ms | {step['median_extra_percent']:+.2f} % | ≤ 1 % |")
    print(f"raw: {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
