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
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import job_phases, record  # noqa: E402
from bench.api import Web  # noqa: E402
from bench.runner_overhead import BARE  # noqa: E402  the same single-process training

BARE_DDP = textwrap.dedent("""
    import os, sys
    import numpy as np, torch, torch.distributed as dist, torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    from workers.runner.workloads.classify import load_arrays
    samples, epochs, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo"); rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x, y = load_arrays("synthetic", samples, 0)
    order = np.random.default_rng(0).permutation(len(x)); n_val = int(round(len(x) * 0.2))
    tr, va = order[n_val:], order[:n_val]
    mean, std = x[tr].mean(0), x[tr].std(0) + 1e-6; x = (x - mean) / std
    train = TensorDataset(torch.from_numpy(x[tr]), torch.from_numpy(y[tr]))
    val = TensorDataset(torch.from_numpy(x[va]), torch.from_numpy(y[va]))
    model = DDP(nn.Sequential(nn.Linear(20, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 4)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=batch, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        with torch.no_grad():  # every rank evaluates the whole validation split, as the runner does
            acc = sum(int((model(a).argmax(-1) == b).sum()) for a, b in DataLoader(val, batch_size=batch)) / len(val)
        if rank == 0:
            print(f"epoch {epoch + 1} loss={loss.item():.3f} val_acc={acc:.3f}", flush=True)
    if rank == 0:
        torch.save(model.module.state_dict(), "model.pt")
    dist.destroy_process_group()
""")


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
    tmp = Path(tempfile.mkdtemp(prefix="trainhub-overhead-"))
    from tests.conftest import RedisServer

    redis = RedisServer(tmp)
    redis.start()
    env = {**os.environ, "TRAINHUB_VAR_DIR": str(tmp), "REDIS_URL": redis.url,
           "DJANGO_SETTINGS_MODULE": "trainhub.settings"}
    os.environ.update(env)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from trainhub.jobs.models import Job
    from trainhub.pools.models import WorkerPool

    WorkerPool.objects.update_or_create(name="cpu", defaults={"kind": "cpu", "queue": "cpu", "sandbox": ns.sandbox})
    user = get_user_model().objects.create_user("bench", password="bench-password")
    worker = subprocess.Popen([sys.executable, "manage.py", "runworker", "--pool", "cpu", "--loglevel", "WARNING"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    (tmp / "bare.py").write_text(BARE)
    (tmp / "bare_ddp.py").write_text(BARE_DDP)
    bare_env = {**env, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    args = [str(ns.samples), str(ns.epochs), str(ns.batch)]

    def bare(argv, threads):
        started = time.perf_counter()
        subprocess.run(argv, cwd=tmp, env={**bare_env, "OMP_NUM_THREADS": str(threads)}, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - started

    def through_dashboard(web, mode, procs):
        spec = {"name": f"overhead-{mode}", "mode": mode, "resources": {"procs_per_node": procs},
                "data": {"dataset": "synthetic", "samples": ns.samples, "batch_size": ns.batch},
                "model": {"name": "mlp", "hidden": 128, "layers": 2},
                "train": {"epochs": ns.epochs, "lr": 1e-3, "log_every_steps": 10**6},
                "checkpoint": {"every_steps": 0, "keep_last": 1}}
        started = time.perf_counter()
        pk = web.submit(spec)
        while Job.objects.filter(pk=pk, status__in=["queued", "running", "cancelling"]).exists():
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        assert Job.objects.get(pk=pk).status == "succeeded", Job.objects.get(pk=pk).error
        return elapsed

    threads = max(1, (os.cpu_count() or 1))  # what the executor gives a one-process job
    rows = {"bare": [], "dash": [], "bare_ddp": [], "dash_ddp": []}
    try:
        with Web(env, user, tmp / "web.log") as web:
            time.sleep(3)  # the worker connects
            through_dashboard(web, "centralized", 1)  # warm-up: page cache, first claim
            for _ in range(ns.repeats):
                rows["bare"].append(bare([sys.executable, "bare.py", *args], threads))
                rows["dash"].append(through_dashboard(web, "centralized", 1))
                rows["bare_ddp"].append(bare([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                              "--nproc-per-node", "2", "bare_ddp.py", *args], max(1, threads // 2)))
                rows["dash_ddp"].append(through_dashboard(web, "ddp", 2))
    finally:
        os.killpg(worker.pid, 15)
        worker.wait(30)
        redis.stop()
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
