"""Soak: N tiny real jobs through two workers, a share of them cancelled while *running*, one worker
SIGKILLed midway and restarted. Checks that every job ends in a truthful final state (cancelled exactly when
a cancel won, or succeeded when it finished first), every job's log is gap-free and ends with its exit line,
no job process is left and no GPU lease is held. Exit code 1 if any check fails; the raw result (JSON) is
written under bench/results/.

    .venv/bin/python bench/soak.py --jobs 500

Not a test (minutes of real jobs): the result goes to docs/RELIABILITY.md ("Soak").
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import record  # noqa: E402
SPEC = {"data": {"dataset": "iris"}, "model": {"name": "logreg"}, "train": {"epochs": 1}, "max_restarts": 1}
FAST = {"TRAINHUB_LEASE_SECONDS": "6", "TRAINHUB_HEARTBEAT_SECONDS": "1", "TRAINHUB_GUARD_GRACE_SECONDS": "1",
        "TRAINHUB_KILL_GRACE_SECONDS": "3"}
FINAL = ("succeeded", "failed", "cancelled")


def job_processes() -> list[str]:
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "job-" in cmd and "trainhub-soak-" in cmd:
            found.append(f"{proc.pid}: {cmd[:120]}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--cancel", type=float, default=0.1, help="share of jobs cancelled once seen running")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--seed", type=int, default=6)
    ns = parser.parse_args()
    rng = random.Random(ns.seed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(2))  # the workers and Redis are stopped on the way out
    tmp = Path(tempfile.mkdtemp(prefix="trainhub-soak-"))
    from tests.conftest import RedisServer

    redis = RedisServer(tmp)
    redis.start()
    env = {**os.environ, "TRAINHUB_VAR_DIR": str(tmp), "REDIS_URL": redis.url, "PYTHONUNBUFFERED": "1",
           "DJANGO_SETTINGS_MODULE": "trainhub.settings", "TRAINHUB_RUNS_DIR": str(tmp / "runs"), **FAST}
    os.environ.update(env)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from trainhub.jobs.logs import iter_all
    from trainhub.jobs.models import Job, JobEvent
    from trainhub.jobs.services import job_cancel, job_submit
    from trainhub.pools.models import WorkerPool
    from trainhub.runs.models import GpuLease

    WorkerPool.objects.get_or_create(name="cpu", defaults={"kind": "cpu", "queue": "cpu"})
    user = get_user_model().objects.create_user("soak", password="soak-password-1")

    def worker(name: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "manage.py", "runworker", "--pool", "cpu", "--slots", "1", "--name", name,
                                 "--loglevel", "WARNING"], cwd=ROOT, env=env, start_new_session=True,
                                stdout=open(tmp / f"{name}.log", "ab"), stderr=subprocess.STDOUT)

    def log_problem(pk: int) -> str:
        """A job that started has a gap-free log ending with the executor's exit line, one start per attempt."""
        lines = [line for chunk in iter_all(pk) for line in chunk]
        if not lines:
            return "" if not JobEvent.objects.filter(job_id=pk, new="running").exists() else "ran, but no log"
        seqs = [line.seq for line in lines]
        if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
            return "a gap in seq"
        if not lines[-1].text.startswith("finished: "):
            return f"last line is {lines[-1].text[:60]!r}, not the exit line"
        return ""

    workers = {"a": worker("soak-a@soak"), "b": worker("soak-b@soak")}
    started = time.monotonic()
    ids = [job_submit(owner=user, data={**SPEC, "name": f"soak-{i}"}).pk for i in range(ns.jobs)]
    to_cancel = set(rng.sample(ids, int(ns.jobs * ns.cancel)))
    asked: set[int] = set()  # cancels that won (the job was running; it is now cancelling)
    missed: set[int] = set()  # chosen, but final before it was ever seen running
    killed_at = restarted_at = None
    try:
        while time.monotonic() - started < ns.timeout:
            time.sleep(0.5)
            statuses = dict(Job.objects.filter(pk__in=ids).values_list("pk", "status"))
            done = sum(s in FINAL for s in statuses.values())
            for pk in to_cancel - asked - missed:
                if statuses[pk] == "running" and job_cancel(Job.objects.get(pk=pk), reason="soak: cancel while running"):
                    asked.add(pk)
                elif statuses[pk] in FINAL:
                    missed.add(pk)
            if killed_at is None and done >= ns.jobs // 2:
                os.killpg(workers["a"].pid, signal.SIGKILL)
                workers["a"].wait()
                killed_at = time.monotonic() - started
            if killed_at is not None and restarted_at is None and time.monotonic() - started > killed_at + 5:
                workers["a"] = worker("soak-a@soak")
                restarted_at = time.monotonic() - started
            if done == ns.jobs:
                break
            if int(time.monotonic() - started) % 15 == 0:
                print(f"{time.monotonic() - started:.0f} s: {done}/{ns.jobs} final", file=sys.stderr, flush=True)
        elapsed = time.monotonic() - started
        time.sleep(3)  # the guards' grace after the SIGKILL, and the last reaps
        orphans = job_processes()
    finally:
        for proc in workers.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(60)
        redis.stop()
    jobs = list(Job.objects.filter(pk__in=ids).values("pk", "status", "error", "attempt"))
    counts = collections.Counter(j["status"] for j in jobs)
    by_status = {status: {j["pk"] for j in jobs if j["status"] == status} for status in counts}
    problems = []
    stuck = [j["pk"] for j in jobs if j["status"] not in FINAL]
    if stuck:
        problems.append(f"{len(stuck)} job(s) not final: {stuck[:10]}")
    cancelled = by_status.get("cancelled", set())
    if cancelled - asked:
        problems.append(f"cancelled without a cancel that won: {sorted(cancelled - asked)[:10]}")
    finished_first = asked - cancelled  # a cancel that lost the race to the job's own end must say so
    raced = set(JobEvent.objects.filter(job_id__in=finished_first, old="cancelling", new="succeeded")
                .values_list("job_id", flat=True))
    if finished_first - raced:
        problems.append(f"cancel won but the job is neither cancelled nor succeeded from cancelling: "
                        f"{sorted(finished_first - raced)[:10]}")
    strays = set(JobEvent.objects.filter(job_id__in=set(ids) - asked, new="cancelling").values_list("job_id", flat=True))
    if strays:
        problems.append(f"went to cancelling without being asked: {sorted(strays)[:10]}")
    unexplained = [j["pk"] for j in jobs if j["status"] == "failed" and not j["error"]]
    if unexplained:
        problems.append(f"failed without a reason: {unexplained[:10]}")
    bad_logs = {pk: why for pk in ids if (why := log_problem(pk))}
    if bad_logs:
        problems.append(f"{len(bad_logs)} log(s) wrong: {dict(list(bad_logs.items())[:5])}")
    if orphans:
        problems.append(f"{len(orphans)} job process(es) left: {orphans[:5]}")
    leases = GpuLease.objects.count()
    if leases:
        problems.append(f"{leases} GPU lease(s) held")
    if sum(counts.values()) != ns.jobs:
        problems.append(f"{sum(counts.values())} jobs found, {ns.jobs} submitted")
    result = {"jobs": ns.jobs, "elapsed_s": round(elapsed, 1), "counts": dict(counts),
              "cancels_won_while_running": len(asked), "cancel_targets_finished_first": len(missed),
              "cancel_lost_race_to_success": len(raced),
              "worker_killed_at_s": killed_at and round(killed_at, 1),
              "worker_restarted_at_s": restarted_at and round(restarted_at, 1),
              "retried": sum(j["attempt"] > 1 for j in jobs), "logs_checked": len(ids), "bad_logs": len(bad_logs),
              "failure_reasons": dict(collections.Counter(j["error"][:80] for j in jobs if j["status"] == "failed")),
              "orphans": len(orphans), "gpu_leases": leases, "problems": problems, "var_dir": str(tmp)}
    record.write("soak", result)
    print(json.dumps(result, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
