"""A cross-site job with one site on a local pool and one on a Slurm pool (the real two-node test
cluster): submitted through the API, each site's place taken by a real Celery worker of its pool,
the Slurm site run as an sbatch job; the job page's live ``sites`` event follows it."""
from __future__ import annotations

import re
import threading

import psutil
import pytest

from tests.asgi_server import session_cookie, sse_events
from tests.conftest import wait_for
from tests.crosssite import sites
from tests.slurm.test_jobs import final, log_text, slurm_pool, submit  # noqa: F401 (fixture)
from trainhub.jobs.models import Job, Metric
from trainhub.jobs.sites import site_rows
from trainhub.pools.models import Worker, WorkerPool
from trainhub.runs.models import GangMember

pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]
# a lost site waits 5 s before it starts again: the page's live channel (about one read a second,
# two while the log is quiet) shows that "lost, restarting in N s" for sure
# one OpenMP thread per rank: both sites share this machine (tests/crosssite/test_jobs.py)
LOCAL = {"TRAINHUB_WORKER_ADDRESS": "127.0.0.1", "TRAINHUB_SITE_RESTART_SECONDS": "5", "OMP_NUM_THREADS": "1"}


def spec(**train) -> dict:
    # min_sites 2: every sync needs both sites, so while the Slurm site is down lab-a waits at its
    # next sync instead of training on alone (the local kill test covers that): the test stays short
    return {"name": "lab and cluster", "mode": "ddp", "sites": [{"pool": "lab-a"}, {"pool": "hpc"}],
            "sync": {"algorithm": "diloco", "every": 50, "timeout_seconds": 10, "min_sites": 2},
            "data": {"dataset": "digits", "batch_size": 32}, "max_restarts": 1,
            "train": {"max_steps": 1000, "epochs": 1000, "log_every_steps": 50, **train}}


@pytest.fixture
def two_kinds(start_worker, slurm_pool, slurm_cluster):  # noqa: F811
    WorkerPool.objects.create(name="lab-a", queue="lab-a", kind="cpu")
    start_worker("lab-a", slots=1, name="lab-a@test", extra_env=LOCAL)
    start_worker("hpc", slots=2, name="hpc@test", extra_env={**LOCAL, "SLURM_CONF": slurm_cluster})
    wait_for(lambda: Worker.objects.filter(hostname__in=["lab-a@test", "hpc@test"]).count() == 2,
             message="both sites' workers to register")


def slurm_site_jobs(cluster, job_id: int) -> list[str]:
    """The site's Slurm jobs still pending or running."""
    return cluster.run("squeue", "-h", "-n", f"trainhub-{job_id}-site-hpc", "-o", "%i").split()


def slurm_site_history(cluster, job_id: int) -> list[tuple[str, str]]:
    """Every Slurm job of the site that Slurm still remembers (MinJobAge), with its state, oldest first."""
    rows = cluster.run("squeue", "-h", "-t", "all", "-n", f"trainhub-{job_id}-site-hpc", "-o", "%i %T").split("\n")
    return sorted((tuple(row.split()) for row in rows if row.strip()), key=lambda r: int(r[0]))


def synced(job_id: int, name: str) -> int:
    return Metric.objects.filter(job_id=job_id, name=name).count()


class SitesEvents:
    """The job page's live channel in a thread: the Sites panel's HTML of every ``sites`` event."""

    def __init__(self, web, job_id: int, client):
        self.html: list[str] = []
        self.thread = threading.Thread(target=self._follow, args=(web, job_id, session_cookie(client)), daemon=True)
        self.thread.start()

    def _follow(self, web, job_id, cookies):
        import httpx

        with httpx.stream("GET", f"{web.url}/jobs/{job_id}/logs/stream", cookies=cookies, timeout=60,
                          params={"channel": "page"}) as response:
            for event, _ident, data in sse_events(response):
                if event == "sites":
                    self.html.append(data["html"])
                if event == "end":
                    return

    def hpc_rows(self) -> list[tuple[str, str]]:
        """The Slurm site's row in each event: its state and its "restarts of max" cell."""
        rows = [html.split('<tr data-pool="hpc"', 1)[1].split("</tr>", 1)[0] for html in self.html
                if '<tr data-pool="hpc"' in html]
        return [(re.search(r'class="site-state">([^<]*)<', row).group(1),
                 re.search(r"<td>(\d+ of \d+)</td>", row).group(1)) for row in rows]


def test_a_slurm_site_cancelled_in_slurm_is_submitted_again_heals_and_ends_with_the_local_sites_weights(
        two_kinds, user_client, slurm_cluster_handle, live_settings, web):
    job_id = submit(user_client, spec())
    events = SitesEvents(web, job_id, user_client)
    wait_for(lambda: synced(job_id, "hpc/sync_outer_step") >= 1, timeout=120,
             message=f"the Slurm site to sync once: {log_text(job_id)[-3000:]}")
    places = {m.node_rank: m.worker.hostname for m in GangMember.objects.filter(job_id=job_id).select_related("worker")}
    assert places == {0: "lab-a@test", 1: "hpc@test"}  # a Slurm site is one place, its worker submits it
    first = slurm_site_jobs(slurm_cluster_handle, job_id)
    assert len(first) == 1
    # lab-a paused (SIGSTOP): with min_sites 2 the Slurm site cannot pass its next sync, so however
    # fast this machine trains, the job is still running when its Slurm site is cancelled. 1,000 steps:
    # the ~950 left after hpc's first sync outlast noticing it (a metrics read and a poll) and the pause
    with sites.frozen(job_id):
        slurm_cluster_handle.run("scancel", first[0])  # an operator, or the cluster, ends the site's Slurm job
        wait_for(lambda: site_rows(Job.objects.get(pk=job_id))[1]["state"].startswith("lost"), timeout=60,
                 message="the job page to show the Slurm site lost")
    job = wait_for(lambda: final(job_id), timeout=180, message="the job to finish")
    text = log_text(job_id)
    assert job.status == "succeeded", (job.error, text[-3000:])
    assert "[site hpc] site lost: cancelled" in text and "outside TrainHub" in text
    assert "[site lab-a]" in text and "[site hpc]" in text and "step 1000/1000" in text
    # healed: the new Slurm job's first sync is with its peer, past hpc's first (lab-a's outer step).
    # Read from the site's events, not by polling for the page's "healed" (it lasts the steps left)
    rejoined = sites.syncs_since_its_last_start(job_id, "hpc")
    assert rejoined and rejoined[0]["sync_outer_step"] > 1 and rejoined[0]["sync_participants"] == 2, rejoined
    runs = live_settings.TRAINHUB_RUNS_DIR
    assert sites.same_weights(sites.final_weights(runs / f"job-{job_id}", 1000),
                              sites.final_weights(runs / f"job-{job_id}-site-hpc", 1000))
    assert [(r["pool"], r["state"], r["restarts"], r["outer_step"]) for r in site_rows(job)] == [
        ("lab-a", "finished", 0, 20), ("hpc", "finished", 1, 20)]
    events.thread.join(timeout=30)
    seen = events.hpc_rows()  # what a viewer of the job page saw, live: (state, restarts) per sites event
    lost = next(i for i, (state, _restarts) in enumerate(seen) if state.startswith("lost, restarting in"))
    assert seen[lost][1] == "1 of 1" and seen[-1] == ("finished", "1 of 1"), seen
    assert ("running", "0 of 1") in seen[:lost], seen
    # submitted again as a new Slurm job, which ended with the job; nothing of the site left in Slurm
    history = slurm_site_history(slurm_cluster_handle, job_id)
    assert [(slurm_id == first[0], state) for slurm_id, state in history] == [(True, "CANCELLED"), (False, "COMPLETED")]


def test_cancelling_a_job_with_a_slurm_site_ends_its_slurm_job_every_process_and_the_lighthouse(
        two_kinds, user_client, slurm_cluster_handle, live_settings):
    job_id = submit(user_client, spec(max_steps=100000))
    wait_for(lambda: synced(job_id, "hpc/sync_outer_step") >= 1 and synced(job_id, "sync_outer_step") >= 1,
             timeout=120, message=f"both sites to sync once: {log_text(job_id)[-3000:]}")
    assert slurm_site_jobs(slurm_cluster_handle, job_id)
    assert user_client.post(f"/api/jobs/{job_id}/cancel").status_code in (200, 202)
    assert wait_for(lambda: final(job_id), timeout=90, message="the cancel").status == "cancelled"
    runs = str(live_settings.TRAINHUB_RUNS_DIR)
    lighthouse = f"[::]:{GangMember.objects.get(job_id=job_id, node_rank=0).lighthouse.rsplit(':', 1)[1]}"

    def left() -> list[str]:
        mine = (f"{runs}/job-{job_id}/", f"{runs}/job-{job_id}-site-", lighthouse)
        procs = [" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])
                 if any(part.startswith(mine) for part in p.info["cmdline"] or [])]
        return procs + slurm_site_jobs(slurm_cluster_handle, job_id)
    wait_for(lambda: not left(), timeout=60, message="the Slurm job, every process and the lighthouse to end")


def test_a_two_node_slurm_site_trains_with_ddp_across_both_nodes_and_ends_with_the_local_sites_weights(
        start_worker, slurm_pool, slurm_cluster, slurm_cluster_handle, user_client, live_settings):  # noqa: F811
    # two ranks per site (torchft pairs rank r of each site): lab-a one node of two processes, hpc
    # one process on each of the Slurm cluster's two nodes, its torchrun rendezvous from the allocation
    WorkerPool.objects.create(name="lab-a", queue="lab-a", kind="cpu")
    start_worker("lab-a", slots=2, name="lab-a@test", extra_env=LOCAL)
    start_worker("hpc", slots=2, name="hpc@test", extra_env={**LOCAL, "SLURM_CONF": slurm_cluster})
    wait_for(lambda: Worker.objects.filter(hostname__in=["lab-a@test", "hpc@test"]).count() == 2,
             message="both sites' workers to register")
    job_id = submit(user_client, {**spec(max_steps=200), "sites": [{"pool": "lab-a", "procs_per_node": 2},
                                                      {"pool": "hpc", "nodes": 2, "procs_per_node": 1}]})
    job = wait_for(lambda: final(job_id), timeout=300, message="the job to finish")
    text = log_text(job_id)
    assert job.status == "succeeded", (job.error, text[-3000:])
    assert "[site hpc] rank 0/2 ready" in text and "[site hpc] rank 1/2 ready" in text
    # the Slurm site was one Slurm job over both nodes (its torchrun rendezvous from the allocation)
    assert slurm_cluster_handle.run("squeue", "-h", "-t", "all", "-n", f"trainhub-{job_id}-site-hpc",
                                    "-o", "%N %T").split() == ["n[1-2]", "COMPLETED"]
    runs = live_settings.TRAINHUB_RUNS_DIR
    assert sites.same_weights(sites.final_weights(runs / f"job-{job_id}", 200),
                              sites.final_weights(runs / f"job-{job_id}-site-hpc", 200))
    assert [(r["pool"], r["state"], r["outer_step"], r["participants"]) for r in site_rows(job)] == [
        ("lab-a", "finished", 4, 2), ("hpc", "finished", 4, 2)]


def test_a_slurm_sites_worker_killed_is_replaced_the_lost_workers_slurm_job_cancelled_and_the_site_submitted_again(
        start_worker, slurm_pool, slurm_cluster, slurm_cluster_handle, user_client, live_settings):  # noqa: F811
    """The worker that submitted a Slurm site dies; its batch job runs on in Slurm. Another worker of
    the Slurm pool takes the place over: it cancels the lost worker's batch job and submits the site
    again, which heals from lab-a and rejoins; the job goes on (attempt 1)."""
    fast = {**LOCAL, "TRAINHUB_LEASE_SECONDS": "5", "TRAINHUB_HEARTBEAT_SECONDS": "1",
            "TRAINHUB_GUARD_GRACE_SECONDS": "1"}
    WorkerPool.objects.create(name="lab-a", queue="lab-a", kind="cpu")
    start_worker("lab-a", slots=1, name="lab-a@test", extra_env=fast)
    hpc = {name: start_worker("hpc", slots=1, name=name, extra_env={**fast, "SLURM_CONF": slurm_cluster})
           for name in ("hpc@test", "hpc-2@test")}
    wait_for(lambda: Worker.objects.filter(hostname__in=["lab-a@test", *hpc]).count() == 3,
             message="the three workers to register")
    job_id = submit(user_client, spec(max_steps=3000))
    sites.wait_for_syncs(job_id, "hpc", 1, timeout=120)
    holder = GangMember.objects.select_related("worker").get(job_id=job_id, node_rank=1).worker.hostname
    spare = next(name for name in hpc if name != holder)
    first = slurm_site_jobs(slurm_cluster_handle, job_id)
    assert len(first) == 1
    # the old Slurm job trains on with lab-a until the spare has taken over (a lapsed lease, then scancel:
    # ~7 s), and the sites train up to ~1,000 steps/s here: lab-a stalls meanwhile, so neither passes its
    # next sync and the job is still mid-run when the new Slurm job starts, however fast this machine is
    with sites.frozen(job_id):
        hpc[holder].proc.kill()  # SIGKILL: its Slurm job runs on, followed by nobody
        wait_for(lambda: GangMember.objects.get(job_id=job_id, node_rank=1).worker.hostname == spare, timeout=60,
                 message=f"{spare} to take over the Slurm site from {holder}")
    job = wait_for(lambda: final(job_id), timeout=240, message="the job to finish")
    text = log_text(job_id)
    assert job.status == "succeeded", (job.error, text[-3000:])
    assert job.attempt == 1
    assert f"[site hpc] site lost: its worker {holder} is gone" in text and f"worker {spare} takes its place" in text
    rejoined = sites.syncs_since_its_last_start(job_id, "hpc")  # healed from lab-a, not at outer step 1
    assert rejoined and rejoined[0]["sync_outer_step"] > 1 and rejoined[0]["sync_participants"] == 2, rejoined
    runs = live_settings.TRAINHUB_RUNS_DIR
    assert sites.same_weights(sites.final_weights(runs / f"job-{job_id}", 3000),
                              sites.final_weights(runs / f"job-{job_id}-site-hpc", 3000))
    # the lost worker's batch job was cancelled by the one taking over, the new one ran to the end
    history = slurm_site_history(slurm_cluster_handle, job_id)
    assert [(slurm_id == first[0], state) for slurm_id, state in history] == [(True, "CANCELLED"), (False, "COMPLETED")]
    assert not slurm_site_jobs(slurm_cluster_handle, job_id)
