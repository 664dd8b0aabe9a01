"""The Slurm pool on a real local Slurm (tests/slurm_cluster.py: munged, slurmctld, two slurmd):

1. latency, one job at a time, Slurm pool beside a local (Celery) pool: submit → TrainHub running
   (claimed), submit → Slurm running (the "running as slurm job" line), submit → first line the
   job printed;
2. throughput: ``--jobs`` short jobs submitted at once to the Slurm pool (jobs/s until all are
   final), and the same number of raw ``sbatch`` jobs running the same script through ``srun`` on
   the same cluster: TrainHub's added cost per job is the difference of the wall times / jobs.

Jobs are submitted with ``job_submit`` (the API's service, without HTTP). Needs root, slurm-wlm and
munge (``make system-packages``). Writes bench/results/slurm-<time>.json.

    .venv/bin/python bench/slurm.py [--latency-jobs 10] [--jobs 200] [--slots 8]
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
HELLO = "print('hello from the job', flush=True)\n"
FINAL = ("succeeded", "failed", "cancelled")


def median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 3) if xs else None


def wait_final(Job, ids: list[int], timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while Job.objects.filter(pk__in=ids).exclude(status__in=FINAL).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"jobs not final after {timeout:.0f} s")
        time.sleep(0.2)
    return time.monotonic()


def latency(pool: str, n: int, submit, models) -> dict:
    Job, JobEvent, LogLine = models
    claimed, slurm_running, first_line = [], [], []
    for i in range(n):
        job = submit(pool, f"latency-{pool}-{i}")
        wait_final(Job, [job.pk], 300)
        job.refresh_from_db()
        assert job.status == "succeeded", (job.pk, job.error)
        submitted = JobEvent.objects.filter(job=job, new="queued").earliest("at").at
        claimed.append((JobEvent.objects.filter(job=job, new="running").earliest("at").at - submitted).total_seconds())
        line = LogLine.objects.filter(job=job, stream="s", text__startswith="running as slurm job").first()
        if line:
            slurm_running.append((line.at - submitted).total_seconds())
        first_line.append((LogLine.objects.filter(job=job, stream="o").order_by("seq").first().at - submitted)
                          .total_seconds())
    return {"jobs": n, "submit_to_claimed_s": claimed, "submit_to_slurm_running_s": slurm_running,
            "submit_to_first_line_s": first_line, "median_claimed_s": median(claimed),
            "median_slurm_running_s": median(slurm_running), "median_first_line_s": median(first_line)}


def raw_sbatch(cluster, workspace: Path, n: int) -> dict:
    script = workspace / "raw.sh"
    script.write_text(f"#!/bin/bash\nexec srun --ntasks-per-node=1 --nodes=1 {sys.executable} {workspace / 'hello.py'}\n")
    out = workspace / "raw-out"
    out.mkdir(exist_ok=True)
    started = time.monotonic()
    for i in range(n):
        cluster.run("sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=1", "--time=5",
                    "--job-name=raw-bench", "--no-requeue", f"--output={out}/%j.out", str(script))
    submitted = time.monotonic()
    while cluster.run("squeue", "-h", "-n", "raw-bench", "-o", "%i").strip():
        time.sleep(0.2)
    done = time.monotonic()
    printed = sum("hello from the job" in p.read_text() for p in out.glob("*.out"))
    return {"jobs": n, "wall_s": round(done - started, 2), "submit_s": round(submitted - started, 2),
            "jobs_per_s": round(n / (done - started), 3), "printed": printed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-jobs", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--slots", type=int, default=8, help="Slurm jobs the one TrainHub worker follows at once")
    args = parser.parse_args()
    from tests.slurm_cluster import Cluster, missing

    why = missing()
    if why:
        raise SystemExit(f"cannot run: {why}")
    tmp = Path(tempfile.mkdtemp(prefix="thslurm-", dir="/tmp"))
    from tests.conftest import RedisServer

    redis = RedisServer(tmp)
    redis.start()
    cluster = Cluster(tmp / "slurm")
    cluster.root.mkdir()
    cluster.start()
    env = {**os.environ, "TRAINHUB_VAR_DIR": str(tmp), "TRAINHUB_RUNS_DIR": str(tmp / "runs"), "REDIS_URL": redis.url,
           "DJANGO_SETTINGS_MODULE": "trainhub.settings", "SLURM_CONF": str(cluster.conf)}
    os.environ.update(env)
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from trainhub.jobs.models import Job, JobEvent, LogLine
    from trainhub.jobs.services import job_submit
    from trainhub.pools.models import WorkerPool, Workspace

    workspace = tmp / "workspace"
    workspace.mkdir()
    (workspace / "hello.py").write_text(HELLO)
    Workspace.objects.create(name="hello", path=str(workspace))
    WorkerPool.objects.get_or_create(name="cpu", defaults={"kind": "cpu", "queue": "cpu", "sandbox": "off"})
    WorkerPool.objects.create(name="hpc", queue="hpc", kind="slurm", slurm_conf=str(cluster.conf), partition="debug",
                              slots_per_worker=args.slots)
    user = get_user_model().objects.create_user("bench", password="bench-password", is_staff=True)

    def submit(pool: str, name: str):
        return job_submit(owner=user, data={"name": name, "pool": pool, "mode": "script",
                                            "script": {"workspace": "hello", "entry": "hello.py"}})

    workers = [subprocess.Popen([py, "manage.py", "runworker", "--pool", pool, "--slots", str(slots), "--loglevel",
                                 "WARNING"], cwd=ROOT, env=env, stdout=open(tmp / f"worker-{pool}.log", "wb"),
                                stderr=subprocess.STDOUT, start_new_session=True)
               for pool, slots in (("cpu", 1), ("hpc", args.slots))]
    models = (Job, JobEvent, LogLine)
    try:
        time.sleep(5)  # the workers connect
        result = {"cluster": "2 nodes (n1, n2) of 2 CPUs on this host, slurm-wlm 22.05",
                  "submit": "job_submit service (no HTTP)", "job": "script workload: hello.py prints one line",
                  "local_pool": latency("cpu", args.latency_jobs, submit, models),
                  "slurm_pool": latency("hpc", args.latency_jobs, submit, models)}
        started = time.monotonic()
        ids = [submit("hpc", f"many-{i}").pk for i in range(args.jobs)]
        submitted = time.monotonic()
        done = wait_final(Job, ids, 3600)
        succeeded = Job.objects.filter(pk__in=ids, status="succeeded").count()
        through = {"jobs": args.jobs, "succeeded": succeeded, "wall_s": round(done - started, 2),
                   "submit_s": round(submitted - started, 2), "jobs_per_s": round(args.jobs / (done - started), 3),
                   "worker_slots": args.slots}
        raw = raw_sbatch(cluster, workspace, args.jobs)
        through["raw_sbatch"] = raw
        through["added_s_per_job"] = round((through["wall_s"] - raw["wall_s"]) / args.jobs, 3)
        result["throughput"] = through
    finally:
        for worker in workers:
            os.killpg(worker.pid, 15)
        for worker in workers:
            worker.wait(60)
        cluster.stop()
        redis.stop()
    from bench import record

    record.write("slurm", result)
    lo, sl = result["local_pool"], result["slurm_pool"]
    print(f"submit → running (claimed)   local {lo['median_claimed_s']} s · slurm {sl['median_claimed_s']} s")
    print(f"submit → Slurm running        slurm {sl['median_slurm_running_s']} s")
    print(f"submit → first log line       local {lo['median_first_line_s']} s · slurm {sl['median_first_line_s']} s")
    print(f"{args.jobs} jobs through the Slurm pool: {through['jobs_per_s']} jobs/s ({through['succeeded']} succeeded); "
          f"raw sbatch {raw['jobs_per_s']} jobs/s; TrainHub adds {through['added_s_per_job']} s per job")


if __name__ == "__main__":
    main()
