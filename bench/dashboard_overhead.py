"""End-to-end overhead of TrainHub: the same training as a bare script vs submitted through
the dashboard (REST API → Celery worker → executor → runner → succeeded), for one process
and for 2-rank DDP (bare `torchrun` script vs a TrainHub `ddp` job).

    .venv/bin/python bench/dashboard_overhead.py [--samples 20000] [--epochs 5] [--repeats 7]
        [--cases one,ddp,digits] [--digits-epochs 200] [--cli] [--follow]

Cases: ``one`` and ``ddp`` — an MLP on synthetic rows (``--samples``, ``--epochs``), one process and
2-rank DDP, logging once per run; ``digits`` — the default form's job as a user submits it (sklearn's
digits, the MLP, batch 64, a log window every 10 steps; ``--digits-epochs``), a model whose step is
~1 ms on CPU, so the runner's cost per step shows. ``--cli`` adds a third side to the one-process
cases: the same spec through the runner's command line (``python -m workers.runner --config``, no
dashboard, no sandbox), so what the runner costs and what the dashboard around it costs are told apart.
``--follow`` reads each dashboard job's log through the API once a second while it runs, as ``trainhub logs
-f`` does: a followed job's log is stored every 50 ms and published live, one nobody follows about once a
second (workers/logwriter.py).

Runs a Redis server, a Celery worker and a uvicorn server of its own. Wall times are interleaved
(bare, dashboard, bare, ...) so that load from other work hits both sides alike; the dashboard's
time runs from the HTTP request (``POST /api/jobs`` with an API token: auth, validation, the
transaction and the broker send included) to the job's final status as the worker recorded it
(``finished_at``; the bench looks for it only every 0.25 s, so its looks take no CPU from the job).
Beside each dashboard run it records the CPU-seconds the dashboard's own processes used meanwhile
(the worker with its executor threads, uvicorn, Redis, and this bench process): on two cores, what
they take is what a job using both cores loses. The raw samples go to bench/results/ (bench/record.py).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import bare, job_phases, record  # noqa: E402
from bench.api import Dashboard, Web  # noqa: E402
from workers.runner.report import read_events  # noqa: E402

BARE = bare.SYNTHETIC  # the same training by hand (bench/bare.py): one process, and 2-rank DDP
BARE_DDP = bare.SYNTHETIC_DDP
CASES = ("one", "ddp", "digits")


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User + system CPU-seconds of each process (its own threads, not its children's)."""
    out = {}
    for name, pid in pids.items():
        times = psutil.Process(pid).cpu_times()
        out[name] = times.user + times.system
    times = psutil.Process().cpu_times()
    out["bench"] = times.user + times.system
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sandbox", choices=["required", "off"], default="required",
                        help="the pool's sandbox (workers/sandbox.py): its cost, by running both")
    parser.add_argument("--cases", default=",".join(CASES), help=f"which of {', '.join(CASES)}")
    parser.add_argument("--digits-epochs", type=int, default=200)
    parser.add_argument("--cli", action="store_true",
                        help="also run the one-process cases through `python -m workers.runner` (a third side)")
    parser.add_argument("--follow", action="store_true",
                        help="follow each dashboard job's log through the API once a second, as `trainhub logs -f`")
    parser.add_argument("--threads", type=int, default=0,
                        help="OMP_NUM_THREADS of every training process, both sides (the worker passes its own on); "
                             "default: what the executor gives, the cores over the ranks")
    ns = parser.parse_args()
    cases = [c for c in ns.cases.split(",") if c]
    if not cases or set(cases) - set(CASES):
        parser.error(f"--cases: a comma-separated list of {', '.join(CASES)}; got {ns.cases!r}")
    load_at_start = list(os.getloadavg())
    args = [str(ns.samples), str(ns.epochs), str(ns.batch)]
    threads = ns.threads or max(1, (os.cpu_count() or 1))  # default: what the executor gives a one-process job

    def synthetic(mode: str, procs: int) -> dict:
        return {"name": f"overhead-{mode}", "mode": mode, "resources": {"procs_per_node": procs},
                "data": {"dataset": "synthetic", "samples": ns.samples, "batch_size": ns.batch},
                "model": {"name": "mlp", "hidden": 128, "layers": 2},
                "train": {"epochs": ns.epochs, "lr": 1e-3, "log_every_steps": 10**6},
                "checkpoint": {"every_steps": 0, "keep_last": 1}}

    # case: (bare script's file, its command line, its threads, the job's spec)
    plan = {
        "one": ("bare.py", [sys.executable, "bare.py", *args], threads, synthetic("centralized", 1)),
        "ddp": ("bare_ddp.py", [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                                "2", "bare_ddp.py", *args], ns.threads or max(1, threads // 2), synthetic("ddp", 2)),
        "digits": ("bare_digits.py", [sys.executable, "bare_digits.py", "0", str(ns.digits_epochs), "64"], threads,
                   {"name": "overhead-digits", "mode": "centralized", "data": {"dataset": "digits"},
                    "model": {"name": "mlp"}, "train": {"epochs": ns.digits_epochs}}),  # the form's defaults
    }
    scripts = {"bare.py": BARE, "bare_ddp.py": BARE_DDP, "bare_digits.py": bare.DIGITS}
    cli_cases = [c for c in cases if ns.cli and c != "ddp"]
    rows = {k: [] for c in cases for k in (f"bare_{c}", f"dash_{c}")}
    rows.update({k: [] for c in cli_cases for k in (f"cli_{c}", f"cli_training_{c}")})
    beside: dict[str, list[dict[str, float]]] = {c: [] for c in cases}  # the dashboard's CPU-s per run
    with Dashboard("trainhub-overhead-", sandbox=ns.sandbox,
                   env_extra={"OMP_NUM_THREADS": str(ns.threads)} if ns.threads else None) as dash, \
            Web(dash.env, dash.user, dash.tmp / "web.log") as web:
        tmp = dash.tmp
        for name, text in scripts.items():
            (tmp / name).write_text(text)
        bare_env = {**dash.env, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}

        def run_bare(argv, threads):
            started = time.perf_counter()
            subprocess.run(argv, cwd=tmp, env={**bare_env, "OMP_NUM_THREADS": str(threads)}, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return time.perf_counter() - started

        def run_cli(case, spec, threads):
            """The spec through the runner's command line: (wall seconds, its training phase in seconds)."""
            run_dir = tmp / "cli" / f"{case}-{len(rows[f'cli_{case}'])}"
            run_dir.mkdir(parents=True)
            (run_dir / "job.yaml").write_text(json.dumps(spec))  # JSON is YAML
            wall = run_bare([sys.executable, "-m", "workers.runner", "--config", str(run_dir / "job.yaml"),
                             "--run-dir", str(run_dir)], threads)
            events = {e["type"]: e["time"] for e in read_events(run_dir)[0]}
            return wall, events["end"] - events["start"]

        time.sleep(3)  # the worker connects
        web.run(synthetic("centralized", 1))  # warm-up: page cache, first claim
        pids = {"worker": dash.worker.pid, "web": web.proc.pid, "redis": dash.redis.proc.pid}
        for _ in range(ns.repeats):
            for case in cases:
                _, argv, n, spec = plan[case]
                rows[f"bare_{case}"].append(run_bare(argv, n))
                if case in cli_cases:
                    wall, training = run_cli(case, spec, n)
                    rows[f"cli_{case}"].append(wall)
                    rows[f"cli_training_{case}"].append(training)
                before = cpu_seconds(pids)
                rows[f"dash_{case}"].append(web.run(spec, follow=ns.follow)[1])
                after = cpu_seconds(pids)
                beside[case].append({k: round(after[k] - before[k], 3) for k in after})
    med = {k: statistics.median(v) for k, v in rows.items()}
    ratios = {c: med[f"dash_{c}"] / med[f"bare_{c}"] for c in cases}
    cli_ratios = {c: med[f"cli_{c}"] / med[f"bare_{c}"] for c in cli_cases}
    titles = {"one": f"one process, synthetic ({ns.samples} rows, batch {ns.batch}, {ns.epochs} epochs)",
              "ddp": f"DDP, 2 ranks (gloo), synthetic ({ns.samples} rows, batch {ns.batch}, {ns.epochs} epochs)",
              "digits": f"the default form's digits MLP, {ns.digits_epochs} epochs, a log window every 10 steps"}
    print(f"median of {ns.repeats}, pool sandbox {ns.sandbox}, OMP_NUM_THREADS {ns.threads or 'as the executor sets'}"
          f"{', each job followed through the API' if ns.follow else ''}\n")
    print("| run | bare | through TrainHub (submit → succeeded) | ratio |")
    print("| --- | --- | --- | --- |")
    for c in cases:
        print(f"| {titles[c]} | {med[f'bare_{c}']:.2f} s | {med[f'dash_{c}']:.2f} s | {ratios[c]:.3f}x |")
    for c in cli_cases:
        print(f"\n{c} through the runner's command line: {med[f'cli_{c}']:.2f} s, {cli_ratios[c]:.3f}x the bare "
              f"script; its training phase {med[f'cli_training_{c}']:.2f} s (the dashboard's: in the phases below)")
    beside_med = {c: {k: statistics.median(run[k] for run in runs) for k in runs[0]} for c, runs in beside.items()}
    for c in cases:
        print(f"\n{c}: the dashboard's processes beside the job, CPU-s (median): "
              + " ".join(f"{k}={v:.2f}" for k, v in beside_med[c].items()))
    phases = job_phases.medians(job_phases.phases(tmp))  # where the dashboard side's seconds went
    for name, values in phases.items():
        print(f"\n{name}: " + " ".join(f"{k}={v:.2f}" for k, v in values.items()))
    print(f"\nvar dir (bench/job_phases.py reads it): {tmp}")
    record.write("dashboard_overhead", {
        "samples": ns.samples, "epochs": ns.epochs, "batch": ns.batch, "repeats": ns.repeats, "sandbox": ns.sandbox,
        "cases": cases, "digits_epochs": ns.digits_epochs, "threads": ns.threads or "the executor's",
        "submit": "HTTP POST /api/jobs (API token) -> final status (finished_at; looked for every 0.25 s)",
        "followed": "the log read through GET /api/jobs/{id}/logs once a second while it ran" if ns.follow else False,
        "seconds": rows, "median_s": med, "ratios": ratios, "cli_ratios": cli_ratios,
        **({"ratio_one_process": ratios["one"]} if "one" in ratios else {}),
        **({"ratio_ddp_2_ranks": ratios["ddp"]} if "ddp" in ratios else {}),
        "phases_median_s": phases, "dashboard_cpu_s_beside_each_run": beside, "dashboard_cpu_s_median": beside_med,
        "var_dir": str(tmp), "load_at_start": load_at_start})


if __name__ == "__main__":
    main()
