"""End-to-end overhead of TrainHub: the same training as a bare script vs submitted through
the dashboard (REST API → Celery worker → executor → runner → succeeded), for one process
and for 2-rank DDP (bare `torchrun` script vs a TrainHub `ddp` job).

    .venv/bin/python bench/dashboard_overhead.py [--samples 20000] [--epochs 5] [--repeats 7]

Runs a Redis server, a Celery worker and a uvicorn server of its own. Wall times are interleaved
(bare, dashboard, bare, ...) so that load from other work hits both sides alike; the dashboard's
time runs from the HTTP request (``POST /api/jobs`` with an API token: auth, validation, the
transaction and the broker send included) to the job's final status seen in the database. The
raw samples go to bench/results/ (bench/record.py).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import bare, job_phases, record  # noqa: E402
from bench.api import Dashboard, Web  # noqa: E402

BARE = bare.SYNTHETIC  # the same training by hand (bench/bare.py): one process, and 2-rank DDP
BARE_DDP = bare.SYNTHETIC_DDP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sandbox", choices=["required", "off"], default="required",
                        help="the pool's sandbox (workers/sandbox.py): its cost, by running both")
    ns = parser.parse_args()
    load_at_start = list(os.getloadavg())
    args = [str(ns.samples), str(ns.epochs), str(ns.batch)]

    def through_dashboard(web, mode, procs):
        spec = {"name": f"overhead-{mode}", "mode": mode, "resources": {"procs_per_node": procs},
                "data": {"dataset": "synthetic", "samples": ns.samples, "batch_size": ns.batch},
                "model": {"name": "mlp", "hidden": 128, "layers": 2},
                "train": {"epochs": ns.epochs, "lr": 1e-3, "log_every_steps": 10**6},
                "checkpoint": {"every_steps": 0, "keep_last": 1}}
        return web.run(spec)[1]

    threads = max(1, (os.cpu_count() or 1))  # what the executor gives a one-process job
    rows = {"bare": [], "dash": [], "bare_ddp": [], "dash_ddp": []}
    with Dashboard("trainhub-overhead-", sandbox=ns.sandbox) as dash, \
            Web(dash.env, dash.user, dash.tmp / "web.log") as web:
        tmp = dash.tmp
        (tmp / "bare.py").write_text(BARE)
        (tmp / "bare_ddp.py").write_text(BARE_DDP)
        bare_env = {**dash.env, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}

        def bare(argv, threads):
            started = time.perf_counter()
            subprocess.run(argv, cwd=tmp, env={**bare_env, "OMP_NUM_THREADS": str(threads)}, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return time.perf_counter() - started

        time.sleep(3)  # the worker connects
        through_dashboard(web, "centralized", 1)  # warm-up: page cache, first claim
        for _ in range(ns.repeats):
            rows["bare"].append(bare([sys.executable, "bare.py", *args], threads))
            rows["dash"].append(through_dashboard(web, "centralized", 1))
            rows["bare_ddp"].append(bare([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                          "--nproc-per-node", "2", "bare_ddp.py", *args], max(1, threads // 2)))
            rows["dash_ddp"].append(through_dashboard(web, "ddp", 2))
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"MLP on synthetic ({ns.samples} rows, batch {ns.batch}, {ns.epochs} epochs), median of {ns.repeats}, pool sandbox {ns.sandbox}\n")
    print("| run | bare | through TrainHub (submit → succeeded) | ratio |")
    print("| --- | --- | --- | --- |")
    print(f"| one process | {med['bare']:.2f} s | {med['dash']:.2f} s | {med['dash'] / med['bare']:.2f}x |")
    print(f"| DDP, 2 ranks (gloo) | {med['bare_ddp']:.2f} s | {med['dash_ddp']:.2f} s | "
          f"{med['dash_ddp'] / med['bare_ddp']:.2f}x |")
    phases = job_phases.medians(job_phases.phases(tmp))  # where the dashboard side's seconds went
    for name, values in phases.items():
        print(f"\n{name}: " + " ".join(f"{k}={v:.2f}" for k, v in values.items()))
    print(f"\nvar dir (bench/job_phases.py reads it): {tmp}")
    record.write("dashboard_overhead", {
        "samples": ns.samples, "epochs": ns.epochs, "batch": ns.batch, "repeats": ns.repeats, "sandbox": ns.sandbox,
        "submit": "HTTP POST /api/jobs (API token) -> final status", "seconds": rows,
        "median_s": med, "ratio_one_process": med["dash"] / med["bare"], "ratio_ddp_2_ranks": med["dash_ddp"] / med["bare_ddp"],
        "phases_median_s": phases, "var_dir": str(tmp), "load_at_start": load_at_start})


if __name__ == "__main__":
    main()
