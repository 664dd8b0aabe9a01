"""Helpers for cross-site tests: a lighthouse and each site's runner as real processes (CPU, gloo)."""
from __future__ import annotations

import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import psutil
import torch
from django.conf import settings

from tests.conftest import processes_naming, wait_for
from workers.runner import launch
from workers.runner.config import dump_yaml, parse_spec
from workers.runner.report import read_events

LIGHTHOUSE = str(Path(sys.executable).parent / "torchft_lighthouse")


def spec(algorithm: str = "diloco", *, every: int = 10, max_steps: int = 60, pools=("lab-a", "cloud-b"),
         min_sites: int = 1, timeout_seconds: int = 30, **extra):
    sync = {"algorithm": algorithm, "every": every, "timeout_seconds": timeout_seconds, "min_sites": min_sites}
    return parse_spec({"name": "cs", "mode": "ddp", "sites": [{"pool": p} for p in pools], "sync": sync,
                       "train": {"max_steps": max_steps, "epochs": 1000, "log_every_steps": 10},
                       "data": {"dataset": "digits", "batch_size": 32}, **extra})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def start_lighthouse(port: int, join_timeout_ms: int = 30000, min_replicas: int = 1) -> subprocess.Popen:
    return subprocess.Popen([LIGHTHOUSE, "--min_replicas", str(min_replicas), "--join_timeout_ms", str(join_timeout_ms),
                             "--bind", f"[::]:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_site(job_spec, index: int, run_dir: Path, lighthouse: str) -> subprocess.Popen:
    run_dir.mkdir(parents=True, exist_ok=True)
    site = job_spec.for_site(index)
    config = run_dir / "job.yaml"
    config.write_text(dump_yaml(site), encoding="utf-8")
    env = {**launch.env(site, run_dir), "TORCHFT_LIGHTHOUSE": lighthouse}
    with open(run_dir / "out.log", "ab") as out:
        return subprocess.Popen(launch.argv(site, config, run_dir), env=env, cwd=run_dir, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def site_processes(job_id: int, site: str) -> list[psutil.Process]:
    """The processes of job ``job_id``'s site ``site`` (guard, torchrun, ranks): found by its run directory
    under this test's runs directory, so another test run's job of the same id is not counted."""
    return processes_naming(f"{settings.TRAINHUB_RUNS_DIR}/job-{job_id}-site-{site}")


def site_run_dir(job_id: int, site: str = "") -> Path:
    """A site's run directory in this test's runs directory: site 0's is the job's own (``site`` "")."""
    return Path(settings.TRAINHUB_RUNS_DIR) / (f"job-{job_id}-site-{site}" if site else f"job-{job_id}")


def wait_for_syncs(job_id: int, site: str, syncs: int, timeout: float = 240) -> None:
    """Until a site's runner has synced ``syncs`` times, read from its own events file every 20 ms.

    Not from the database: its metrics arrive about a second later, and a site trains ~1,000 steps a
    second on an idle machine (one OpenMP thread, digits), so a fault injected on that cue lands near the
    job's end or after it, and the test would then check a job that had nothing left to recover."""
    run_dir, offset, seen = site_run_dir(job_id, site), 0, 0

    def synced() -> bool:
        nonlocal offset, seen
        events, offset = read_events(run_dir, offset)  # the new complete lines only
        seen = max([seen] + [event["values"]["sync_outer_step"] for event in events
                             if "sync_outer_step" in event.get("values", {})])
        return seen >= syncs

    wait_for(synced, timeout=timeout, interval=0.02, message=f"site {site or 0} of job {job_id} to sync {syncs} times")


def syncs_since_its_last_start(job_id: int, site: str) -> list[dict[str, float]]:
    """A site's syncs since its runner last started (their ``sync_*`` values), from its own events file.

    How a test sees that a restarted site healed: its first sync after the restart is at the job's
    outer step, not at 1, and with its peer. Not from the database's metrics after the restart's
    mark: the events its old runner wrote but its worker had not stored yet are stored after the
    mark (by the new holder, which reads the file from its start, or by the same worker's next
    read), so one of the old runner's syncs with its peer would pass for the healed site's."""
    syncs: list[dict[str, float]] = []
    run_dir, offset = site_run_dir(job_id, site), 0
    while True:
        events, moved = read_events(run_dir, offset)
        for event in events:
            if event.get("type") == "start":
                syncs = []
            elif "sync_outer_step" in event.get("values", {}):
                syncs.append(event["values"])
        if moved == offset:
            return syncs
        offset = moved


@contextmanager
def frozen(job_id: int, site: str = ""):
    """A site's runner processes (site 0's by default) paused (SIGSTOP), as a stalled host's would be,
    while the block runs, and resumed after it. With ``min_sites`` 2 no site passes its next sync
    meanwhile, so however fast this machine trains, the job is still mid-run when the fault under test
    has been handled."""
    config = str(site_run_dir(job_id, site) / "job.yaml")
    procs = [p for p in psutil.process_iter(["cmdline"])
             if "workers.runner" in (p.info["cmdline"] or []) and config in (p.info["cmdline"] or [])]
    assert procs, f"no runner process of job {job_id}'s site {site or 0} to pause"
    for proc in procs:
        proc.suspend()
    try:
        yield procs
    finally:
        for proc in procs:
            try:
                proc.resume()
            except psutil.NoSuchProcess:  # stopped meanwhile (by its worker, or the job's end): the test says
                pass


def final_weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / f"step-{step}" / "state.pt", weights_only=False)["model"]


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def running_job(owner, pools=("lab-a", "cloud-b"), max_restarts: int = 1):
    """A running cross-site job as its workers leave it in the database: one gang member per site
    (state "running") and one sync each; for the job page's Sites panel (no processes)."""
    from trainhub.jobs import logs
    from trainhub.jobs.models import Job
    from trainhub.pools.models import Worker, WorkerPool
    from trainhub.runs.models import GangMember

    spec = {"name": "two-sites", "mode": "ddp", "sites": [{"pool": p} for p in pools], "max_restarts": max_restarts,
            "sync": {"algorithm": "diloco", "every": 10}, "train": {"max_steps": 100}}
    made = [WorkerPool.objects.get_or_create(name=p, defaults={"kind": "cpu", "queue": p})[0] for p in pools]
    job = Job.objects.create(owner=owner, name="two-sites", mode="ddp", spec=spec,
                             pool=made[0])
    job.transition("running", reason="every site has its worker")
    for place, pool in enumerate(made):
        GangMember.objects.create(job=job, attempt=job.attempt, worker=Worker.objects.create(hostname=f"{pool.name}@w",
                                  pool=pool), node_rank=place, lease_token=job.lease_token, site_state="running")
    for prefix in ["", *(f"{p}/" for p in pools[1:])]:
        logs.record_metrics(job.pk, 10, {f"{prefix}sync_outer_step": 1, f"{prefix}sync_participants": 2,
                                         f"{prefix}sync_bytes": 4096, f"{prefix}sync_seconds": 0.25})
    return job
