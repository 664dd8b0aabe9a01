"""Where the dashboard's CPU goes while it runs a job: CPU-seconds (user + sys) of every process on
the dashboard path — the Celery worker (its executor, reader, heartbeat threads), the web server,
Redis, the guard, bubblewrap, torchrun — against the training processes, and against the same
training as a bare script. CPU time, not wall time: it holds on a loaded machine, and on a box with
as many cores as ranks every CPU-second the dashboard side burns is taken from training.

    .venv/bin/python bench/dashboard_cpu.py [--repeats 3] [--sandbox required|off] [--cases ddp,digits]

Cases: ``ddp`` — the 2-rank DDP MLP of bench/dashboard_overhead.py (synthetic, 20,000 rows);
``digits`` — the default form's digits MLP (centralized, log every 10 steps), 200 epochs. Every
training process gets ``OMP_NUM_THREADS=--threads`` (the worker passes its own on), both sides.
Jobs are submitted through HTTP (``POST /api/jobs``, API token). The worker, web server and Redis
are long-lived, so their deltas over a job are exact; the job's whole process tree is exact too
(the worker's reaped-children CPU); its split into guard / bwrap / torchrun / ranks comes from
samples every 0.1 s (a process's last < 0.1 s before its exit can be missed). Raw JSON under
bench/results/ (bench/record.py).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402
from bench.api import Dashboard, Web  # noqa: E402
from bench import bare  # noqa: E402
from bench.dashboard_overhead import BARE_DDP  # noqa: E402

SAMPLE_SECONDS = 0.1

BARE_DIGITS = bare.DIGITS  # the default form's job by hand (bench/bare.py)


def cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def role(proc: psutil.Process) -> str:
    """What a process of a job's tree is, from its command line."""
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return "gone"
    text = " ".join(cmd)
    if "workers.guard" in text:
        return "guard"
    if cmd and cmd[0].endswith("bwrap"):
        return "bwrap"
    if "torch.distributed.run" in text or "torchrun" in text or "fastexit.py" in text:  # launch.FAST_TORCHRUN
        return "torchrun"
    if "workers.runner" in text:
        return "rank"
    return "other:" + (os.path.basename(cmd[0]) if cmd else "?")


class Watch:
    """CPU of the long-lived processes (exact deltas) and of one job's tree (sampled)."""

    def __init__(self, named: dict[str, psutil.Process], worker: psutil.Process):
        self.named, self.worker = named, worker

    def start(self) -> None:
        self.before = {k: cpu(p) for k, p in self.named.items()}
        self.threads_before = {t.id: t.user_time + t.system_time for t in self.worker.threads()}
        c = self.worker.cpu_times()
        self.children_before = c.children_user + c.children_system
        self.tree: dict[int, tuple[str, float]] = {}

    def sample(self) -> None:
        for child in self.worker.children(recursive=True):
            try:
                seconds = cpu(child)
                name = self.tree.get(child.pid, (None,))[0] or role(child)
            except psutil.Error:
                continue
            self.tree[child.pid] = (name, seconds)

    def stop(self) -> dict:
        after = {k: cpu(p) for k, p in self.named.items()}
        c = self.worker.cpu_times()
        per_thread = {t.id: t.user_time + t.system_time - self.threads_before.get(t.id, 0.0)
                      for t in self.worker.threads()}
        roles: dict[str, float] = {}
        for name, seconds in self.tree.values():
            roles[name] = roles.get(name, 0.0) + seconds
        return {"processes": {k: after[k] - self.before[k] for k in after},
                "worker_threads": sorted((round(v, 4) for v in per_thread.values() if v > 0.0005), reverse=True),
                "job_tree_total": c.children_user + c.children_system - self.children_before,
                "job_tree_sampled": roles}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sandbox", choices=["required", "off"], default="required")
    parser.add_argument("--cases", default="ddp,digits")
    parser.add_argument("--ddp-samples", type=int, default=20000)
    parser.add_argument("--ddp-epochs", type=int, default=5)
    parser.add_argument("--digits-epochs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1,
                        help="OMP_NUM_THREADS of every training process, both sides (default 1: with more threads "
                             "than free cores, OpenMP's spin-waits dominate the CPU time of a small model)")
    ns = parser.parse_args()
    cases = ns.cases.split(",")
    stack = contextlib.ExitStack()  # closed after the runs: the worker stopped, then Redis
    dash = stack.enter_context(Dashboard("trainhub-cpu-", sandbox=ns.sandbox,
                                         env_extra={"OMP_NUM_THREADS": str(ns.threads)}))
    tmp, env, user = dash.tmp, dash.env, dash.user
    (tmp / "bare_ddp.py").write_text(BARE_DDP)
    (tmp / "bare_digits.py").write_text(BARE_DIGITS)
    threads = ns.threads
    bare_env = {**env, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    specs = {
        "ddp": ({"name": "cpu-ddp", "mode": "ddp", "resources": {"procs_per_node": 2},
                 "data": {"dataset": "synthetic", "samples": ns.ddp_samples, "batch_size": 64},
                 "model": {"name": "mlp", "hidden": 128, "layers": 2},
                 "train": {"epochs": ns.ddp_epochs, "lr": 1e-3, "log_every_steps": 10**6},
                 "checkpoint": {"every_steps": 0, "keep_last": 1}},
                [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                 "bare_ddp.py", str(ns.ddp_samples), str(ns.ddp_epochs), "64"], threads),
        "digits": ({"name": "cpu-digits", "mode": "centralized", "data": {"dataset": "digits"},
                    "model": {"name": "mlp"}, "train": {"epochs": ns.digits_epochs}},
                   [sys.executable, "bare_digits.py", "0", str(ns.digits_epochs), "64"], threads),
    }

    def bare(case: str) -> dict:
        argv, n = specs[case][1], specs[case][2]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=tmp, env={**bare_env, "OMP_NUM_THREADS": str(n)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tree: dict[int, tuple[str, float]] = {}  # sampled as on the dashboard's side: launcher vs ranks
        top = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                members = [top, *top.children(recursive=True)]
                for p in members:
                    tree[p.pid] = ("torchrun" if "torch.distributed.run" in " ".join(p.cmdline()) else "rank", cpu(p))
            except psutil.Error:
                pass
            time.sleep(SAMPLE_SECONDS)
        assert proc.returncode == 0, proc.returncode
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        roles: dict[str, float] = {}
        for name, seconds in tree.values():
            roles[name] = roles.get(name, 0.0) + seconds
        return {"wall_s": time.perf_counter() - started, "sampled": roles,
                "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime}

    def dashboard(web: Web, watch: Watch, case: str) -> dict:
        watch.start()
        me = psutil.Process()
        mine = cpu(me)
        job, wall = web.run(specs[case][0], every=SAMPLE_SECONDS, while_waiting=watch.sample)
        time.sleep(0.5)  # the worker's last writes after the final status (drain, events)
        result = watch.stop()
        result["wall_s"] = wall
        result["bench_process_s"] = cpu(me) - mine  # polling and sampling: not the dashboard's
        result["log_lines"] = job.log_lines
        return result

    rows: dict[str, list] = {f"{side}_{case}": [] for case in cases for side in ("bare", "dash")}
    try:
        with Web(env, user, tmp / "web.log") as web:
            named = {"worker": psutil.Process(dash.worker.pid), "web": psutil.Process(web.proc.pid),
                     "redis": psutil.Process(dash.redis.proc.pid)}
            watch = Watch(named, named["worker"])
            time.sleep(3)  # the worker connects
            dashboard(web, watch, cases[0])  # warm-up
            for _ in range(ns.repeats):
                for case in cases:
                    rows[f"bare_{case}"].append(bare(case))
                    rows[f"dash_{case}"].append(dashboard(web, watch, case))
    finally:
        stack.close()
    summary = {}
    for case in cases:
        dash, bare_rows = rows[f"dash_{case}"], rows[f"bare_{case}"]
        med = lambda f: statistics.median(f(r) for r in dash)  # noqa: E731
        s = {"bare_cpu_s": statistics.median(r["cpu_s"] for r in bare_rows),
             "bare_sampled_cpu_s": {k: statistics.median(r["sampled"].get(k, 0.0) for r in bare_rows)
                                    for k in ("torchrun", "rank")},
             "job_tree_cpu_s": med(lambda r: r["job_tree_total"]),
             **{f"{k}_cpu_s": med(lambda r, k=k: r["processes"][k]) for k in ("worker", "web", "redis")},
             "job_wall_s": med(lambda r: r["wall_s"])}
        roles = sorted({k for r in dash for k in r["job_tree_sampled"]})
        s["job_tree_sampled_cpu_s"] = {k: med(lambda r, k=k: r["job_tree_sampled"].get(k, 0.0)) for k in roles}
        s["extra_cpu_s"] = s["job_tree_cpu_s"] + s["worker_cpu_s"] + s["web_cpu_s"] + s["redis_cpu_s"] - s["bare_cpu_s"]
        s["per_job_second"] = {k: s[f"{k}_cpu_s"] / s["job_wall_s"] for k in ("worker", "web", "redis")}
        summary[case] = s
        print(f"\n{case} (sandbox {ns.sandbox}), median of {ns.repeats}, CPU-seconds (user+sys):")
        for k, v in s.items():
            print(f"  {k}: {v if isinstance(v, dict) else round(v, 3)}")
    record.write("dashboard_cpu", {"sandbox": ns.sandbox, "omp_num_threads": ns.threads, "repeats": ns.repeats, "cases": cases,
                                   "specs": {c: specs[c][0] for c in cases}, "unit": "CPU-seconds (user+sys), not wall",
                                   "summary": summary, "samples": rows})


if __name__ == "__main__":
    main()
