"""Running one place of a cross-site job (``trainhub.runs.crosssite`` gathers the places).

Place 0 (site 0's first node) is the job's leader: it starts the job's torchft lighthouse,
runs its site through the executor (log, metrics, lease, outcome) and collects the other
sites' lines through Redis (``gang_logs``), tagged ``[site <pool>]`` with ranks numbered
across sites. Every other place runs its node of its site here, forwards its lines the same
way and stores its site's metrics as ``<pool>/<name>``. A site whose processes fail is started
again, up to ``max_restarts`` times, while the other sites go on training: it heals from a
peer at its next quorum. A site's pool decides where its processes run (``SITES``): on the
worker (``local``), or as one Slurm batch job per start of the site (``slurm``). The lighthouse
stops when the leader's attempt ends (finish, cancel, failure); if the leader's worker dies, the
lighthouse dies with it and the job is retried. If another place's worker dies, another worker of
its pool takes the place over (``trainhub.runs.crosssite.places_reconcile``) and runs it here as a
restart of the site; the lost worker's lines and state writes, should it wake, are refused (the
place is no longer its own).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Max
from django.utils import timezone

from trainhub.jobs import rundir
from trainhub.jobs.models import Job, Metric, Status
from trainhub.runs import crosssite
from trainhub.pools.models import WorkerPool
from trainhub.pools.registry import free_address
from trainhub.runs.lifecycle import Outcome
from trainhub.runs.models import GangMember
from workers import backends, executor, gang_logs
from workers.backends.slurm import SlurmHandle, SlurmOptions
from workers.events import EventReader
from workers.gang import LeaderExecution, follow_node
from workers.logwriter import DbOutage
from workers.slurm_execution import owner_tag
from workers.slurm_node import NODE_ADDR, NODE_RANK, RDZV_HOST

log = logging.getLogger(__name__)
LIGHTHOUSE = str(Path(sys.executable).parent / "torchft_lighthouse")


def site_run_dir(job: Job, site: int) -> Path:
    """Site 0 uses the job's run directory; site i its own beside it (``job-N-site-<pool>``), so
    that a sandboxed site sees no other job's files."""
    base = rundir.run_dir(job.pk)
    return base if site == 0 else base.with_name(f"{base.name}-site-{job.spec_model.sites[site].pool}")


class Lighthouse:
    """The job's torchft lighthouse: ``torchft_lighthouse`` in a process group of its own,
    guarded (it dies with this worker), its log in ``logs/lighthouse.log``."""

    def __init__(self, address: str, spec, log_dir: Path):
        port = address.rsplit(":", 1)[1]
        log_dir.mkdir(parents=True, exist_ok=True)
        argv = [LIGHTHOUSE, "--bind", f"[::]:{port}", "--min_replicas", str(spec.sync.min_sites),
                "--join_timeout_ms", str(spec.sync.timeout_seconds * 1000)]
        with open(log_dir / "lighthouse.log", "ab") as out:
            self.popen = subprocess.Popen([sys.executable, "-m", "workers.guard", str(os.getpid()), "--", *argv],
                                          stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)

    def stop(self, grace: float = 5.0) -> None:
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.popen.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue


class LocalSite:
    """A site on a pool whose workers run the processes: this worker's node of the site."""

    def __init__(self, job: Job, site: int, pool: WorkerPool, holder: int = 0):
        self.backend = backends.get("local")

    def adapt(self, env: dict, kwargs: dict) -> tuple[dict, dict]:
        """A multi-node site: node 0 names itself by the rendezvous host, as a gang's node 0 does
        (``workers.tasks``). c10d tells nodes apart by (address, pid) and numbers them by sorted
        address, and two sandboxed nodes on one machine have the same host name and the same pid
        in their own pid namespaces: without this they look like one node and the rendezvous
        waits for ever. It also makes node 0 run the site's rank 0 and its store (``MASTER_ADDR``)."""
        if kwargs.get("nnodes", 1) > 1 and kwargs["node_rank"] == 0:
            env = {**env, "PET_LOCAL_ADDR": kwargs["rdzv_endpoint"].rsplit(":", 1)[0]}
        return env, kwargs

    def start(self, run: backends.RunRequest):
        return self.backend.start(run)


class SlurmSite:
    """A site on a Slurm pool: every start of the site (the first, and each restart of a lost
    site) is one batch job of all its nodes (``workers.backends.slurm``), its lines on a Redis
    stream of that start's own, so a late line of a lost start never reaches the next one's."""

    def __init__(self, job: Job, site: int, pool: WorkerPool, holder: int = 0):
        spec = job.spec_model.for_site(site)
        res, self.pool, self.rdzv_id = spec.resources, pool.name, f"job{job.pk}-{job.attempt}-site{site}"
        self.options = SlurmOptions(
            slurm_conf=pool.slurm_conf, partition=pool.partition, account=pool.slurm_account_for(job.owner),
            qos=pool.qos, nodes=res.nodes, procs_per_node=res.procs_per_node, gpus_per_node=res.gpus_per_node,
            time_minutes=spec.timeout_minutes, job_name=f"trainhub-{job.pk}-site-{pool.name}",
            # an earlier attempt's site left running (its worker lost) is cancelled before this one submits
            owner=f"{owner_tag(job)} site {pool.name}", lease_token=job.lease_token,
            # a worker taking the place over: the lost worker's batch job, still running, is cancelled
            holder=f".h{holder}" if holder else "",
            grace_seconds=settings.TRAINHUB_GRACE_SECONDS, redis_url=settings.REDIS_URL)
        self.starts = 0

    def adapt(self, env: dict, kwargs: dict) -> tuple[dict, dict]:
        """Slurm chooses the GPUs and the nodes: the site advertises its node's address, and a
        multi-node site's rendezvous comes from the allocation (``workers.slurm_node``)."""
        env = {**{k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"}, "TRAINHUB_SITE_ADDRESS": NODE_ADDR}
        if self.options.nodes > 1:
            kwargs = {"nnodes": self.options.nodes, "node_rank": NODE_RANK, "rdzv_endpoint": RDZV_HOST,
                      "rdzv_id": self.rdzv_id}
        return env, kwargs

    def start(self, run: backends.RunRequest) -> SlurmHandle:
        self.starts += 1
        # the holder too: a worker taking the place over counts its starts from 1 again
        stream = (f"{gang_logs.stream_key(run.job_id, self.options.lease_token)}:site-{self.pool}"
                  f"{self.options.holder}:{self.starts}")
        return SlurmHandle(run, dataclasses.replace(self.options, stream=stream))


#: a site's pool's backend → how this worker runs its place of the site
SITES = {"local": LocalSite, "slurm": SlurmSite}


def site_runner(job: Job, site: int, holder: int = 0):
    """How this worker runs its place of ``site``; ``holder``: the place's restarts when this worker
    took it over from a lost one (0: its first worker)."""
    pool = WorkerPool.objects.get(name=job.spec_model.sites[site].pool)
    return SITES[pool.backend](job, site, pool, holder)


class SiteHandle:
    """A site's processes, started again when they fail (up to ``restarts`` times) unless cancelled."""

    def __init__(self, backend, request: backends.RunRequest, restarts: int, say, tag, record=None, used: int = 0):
        """``used``: restarts the site used before this worker took its place over (one of them the takeover)."""
        self.backend, self.request, self.left, self.say, self.tag = backend, request, restarts - used, say, tag
        self.record = record or (lambda **state: None)  # the site's state for the job page (``SiteState``)
        self.inner = backend.start(request)
        self.record(site_state="running", restarted=used > 0)
        self.cancelled = False
        self.pending: list = []
        self.restarts = used
        self.restart_at: float | None = None  # a lost site starts again then (TRAINHUB_SITE_RESTART_SECONDS)
        self.lost_code = 0

    def poll(self) -> int | None:
        if self.restart_at is not None:  # lost, waiting to start again: the other sites go on
            if self.cancelled:
                return self.lost_code
            if time.monotonic() < self.restart_at:
                return None
            self.restart_at = None
            self.inner = self.backend.start(self.request)
            self.record(site_state="running", restart_at=None, restarted=True)
            return None
        code = self.inner.poll()
        if code is not None and not self.cancelled and (code == 0 or self.left <= 0):
            self.record(site_state="finished" if code == 0 else "failed")
        if code in (None, 0) or self.cancelled or self.left <= 0:
            return code
        self.inner.close(executor.READERS_SECONDS)
        self.pending += self.inner.lines()
        self.left -= 1
        self.restarts += 1
        delay = settings.TRAINHUB_SITE_RESTART_SECONDS
        why = self.inner.reason() if hasattr(self.inner, "reason") else executor.describe_exit(code)  # Slurm's words
        self.say(f"site lost: {why}; starting it again in {delay:g} s "
                 f"(restart {self.restarts}), it rejoins at the next sync")
        self.lost_code, self.restart_at = code, time.monotonic() + delay
        self.record(site_state="lost", restarts=self.restarts, restart_at=timezone.now() + timedelta(seconds=delay))
        return None

    def cancel(self, grace: float) -> None:
        self.cancelled = True
        if self.restart_at is None:
            self.inner.cancel(grace)

    def lines(self, max_lines: int | None = None):
        out, self.pending = self.pending + list(self.inner.lines(max_lines)), []
        return [(stream, [self.tag(rank, text) for rank, text in items]) for stream, items in out]

    def close(self, timeout: float) -> None:
        self.inner.close(timeout)

    def describe(self) -> str:
        return self.inner.describe()


class SiteState:
    """Writes a site's state (running, lost until ``restart_at``, finished, failed) and restarts
    on its place's ``GangMember`` row, which the job page's Sites panel reads. A site that
    starts again records the job's newest metric id: its first sync after that shows it healed."""

    def __init__(self, job: Job, place: int, worker_id: int | None = None):
        self.member = GangMember.objects.filter(job_id=job.pk, attempt=job.attempt, node_rank=place)
        if worker_id is not None:  # a place taken over from this worker is no longer its to write
            self.member = self.member.filter(worker_id=worker_id)
        self.job_id = job.pk

    def __call__(self, restarted: bool = False, **state) -> None:
        try:
            if restarted:
                state["metric_mark"] = Metric.objects.filter(job_id=self.job_id).aggregate(m=Max("pk"))["m"] or 0
            self.member.update(**state)
        except DatabaseError as exc:  # the page shows a stale state; the site itself goes on
            log.warning("job %s: could not record the site's state %s: %s", self.job_id, state, exc)


def _tagger(spec, site: int):
    """(rank, text) of a site's torchrun → the job-wide rank and ``[site <pool>]`` in front."""
    offset, pool = site * spec.sites[site].nodes * spec.sites[site].procs_per_node, spec.sites[site].pool

    def tag(rank, text):
        return (rank or 0) + offset, f"[site {pool}] {text}"
    return tag


def _request(job: Job, site: int, run_dir: Path, config_name: str, kwargs: dict, env: dict) -> backends.RunRequest:
    request = executor.prepare(job, job.spec_model.for_site(site), run_dir, config_name=config_name,
                               launch_kwargs=kwargs, env_extra=env,
                               pool=WorkerPool.objects.get(name=job.spec_model.sites[site].pool))
    return dataclasses.replace(request, network=True)  # sites meet over TCP (lighthouse, peers)


class SiteLeaderExecution(LeaderExecution):
    """Place 0: site 0 through the executor, restarted on failure, the other sites' lines merged."""

    def __init__(self, job, env_extra, launch_kwargs, places: int, runner):
        super().__init__(job, env_extra, {**launch_kwargs, "nnodes": places})
        self.site_kwargs = launch_kwargs
        self.spec = job.spec_model.for_site(0)
        self.backend = runner  # the site's pool's: this worker, or Slurm
        # after site 0 ends, wait for the other sites' last lines (they end at the same sync)
        self.EOF_SECONDS = job.spec_model.sync.timeout_seconds + 60.0

    def start(self) -> None:
        request = _request(self.job, 0, self.run_dir, "job.yaml", self.site_kwargs, self.env_extra)
        self.system(f"attempt {self.job.attempt}: cross-site, site {self.spec.pool} starting {' '.join(request.argv)}")
        self.handle = SiteHandle(self.backend, request, self.spec.max_restarts, self.system, _tagger(self.spec, 0),
                                 SiteState(self.job, 0))
        receiver = gang_logs.Receiver(self.job.pk, self.job.lease_token, self.launch_kwargs["nnodes"])
        thread = threading.Thread(target=self._receive, args=(receiver,), daemon=True)
        thread.start()
        self.helpers.append(thread)

    def _more(self, receiver: gang_logs.Receiver) -> bool:
        # a place's end of log is its worker's, not the site's: while site 0 runs, another worker may
        # take a stopped place over and send as its new holder
        return not (receiver.done and self.exited.is_set())

    def collect(self) -> int:
        # the job ends once every site has: a site still saving its last checkpoint is not cut off
        self.exited.set()
        self.join_helpers(self.EOF_SECONDS + 5)  # renewing the job's lease: a site may end well after site 0
        return super().collect()


def run_place(member: GangMember, job: Job, env_extra: dict[str, str], lost: str = "") -> Outcome | None:
    """Run this member's place of a started cross-site job. Place 0 returns the job's outcome;
    another place returns a failure to record (its site failed for good), or None. ``lost``: the
    worker this one took the place over from."""
    spec = job.spec_model
    site, node = crosssite.site_of(spec, member.node_rank)
    address = crosssite.lighthouse_address(member)
    env = {**env_extra, "TORCHFT_LIGHTHOUSE": address,
           "TRAINHUB_SITE_ADDRESS": free_address().rsplit(":", 1)[0]}
    runner = site_runner(job, site, member.restarts)
    env, kwargs = runner.adapt(env, crosssite.launch_kwargs(member, spec))
    if member.node_rank != 0:
        return _run_node(job, member, site, node, kwargs, env, runner, lost)
    lighthouse = Lighthouse(address, spec, rundir.run_dir(job.pk) / "logs")
    try:
        return SiteLeaderExecution(job, env, kwargs, len(crosssite.places(spec)), runner).run()
    finally:
        lighthouse.stop()


def _run_node(job: Job, member: GangMember, site: int, node: int, kwargs: dict, env: dict,
              runner, lost: str = "") -> Outcome | None:
    """Any place but 0: run the node until it ends, the job stops or another worker takes the
    place over; its lines to the leader, its site's metrics (first node only) under ``<pool>/``."""
    spec = job.spec_model
    pool, place = spec.sites[site].pool, member.node_rank
    run_dir = site_run_dir(job, site)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    # holder: the place's restarts when taken over; the leader takes only the newest holder's lines
    sender = gang_logs.Sender(job.pk, job.lease_token, place, first_rank=site * spec.sites[site].nodes
                              * spec.sites[site].procs_per_node, holder=member.restarts)

    def say(text: str) -> None:
        sender.add("s", [(sender.first_rank, f"[site {pool}] {text}")])

    request = _request(job, site, run_dir, f"job.node{node}.yaml" if node else "job.yaml", kwargs, env)
    if member.restarts:
        say(f"site lost: its worker {lost or '?'} is gone (stopped, or no heartbeat within its lease); worker "
            f"{member.worker.hostname} takes its place (restart {member.restarts}), it rejoins at the next sync")
    say(f"attempt {job.attempt}: node {node} of site {pool} starting {' '.join(request.argv)}")
    handle = SiteHandle(runner, request, spec.max_restarts, say, _tagger(spec, site),
                        SiteState(job, place, member.worker_id), used=member.restarts)
    events = EventReader(job.pk, run_dir, DbOutage(job.pk), prefix=f"{pool}/") if node == 0 else None
    mine = GangMember.objects.filter(pk=member.pk, worker_id=member.worker_id)
    code, stopped = follow_node(job, handle, sender, run_dir / "logs" / f"site-node{node}.out",
                                check_seconds=executor.EVENTS_SECONDS, on_check=events.pump if events else None,
                                held=mine.exists)
    if events is not None:
        events.pump()
    sender.close()
    if stopped or code == 0:
        return None
    return Outcome(Status.FAILED, code, f"site {pool} failed for good after {handle.restarts} restart(s): "
                                        f"{executor.describe_exit(code)} (see {run_dir.name}/logs)")
