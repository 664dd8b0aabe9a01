"""A cross-site job whose first site spans two nodes: two workers of pool lab-a each run one node
of the site (one torchrun each, DDP across them through the site's own c10d rendezvous), a third
worker runs the single-node site cloud-b with two ranks; DiLoCo between the sites (CPU, gloo)."""
from __future__ import annotations

import pytest

from tests.conftest import wait_for
from tests.crosssite import sites
from tests.crosssite.test_jobs import LOCAL, finished, lighthouses, metric_values
from trainhub.jobs.logs import read_lines
from trainhub.jobs.models import Job
from trainhub.pools.models import Worker, WorkerPool
from trainhub.runs.models import GangMember

pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]  # its rows: tests/crosssite/test_takeover.py, test_api.py run on PostgreSQL
WORKERS = ("lab-a@1", "lab-a@2", "cloud-b@1")


@pytest.fixture
def three_workers(start_worker, db):
    for pool in ("lab-a", "cloud-b"):
        WorkerPool.objects.get_or_create(name=pool, defaults={"kind": "cpu", "queue": pool})
    workers = [start_worker(name.split("@")[0], slots=1, name=name, extra_env=LOCAL) for name in WORKERS]
    wait_for(lambda: Worker.objects.filter(hostname__in=WORKERS).count() == 3, message="the three workers to register")
    return workers


def test_a_two_node_site_trains_with_ddp_across_its_workers_and_ends_with_the_other_sites_weights(
        three_workers, user_client, live_settings):
    data = {"name": "two-node-site", "mode": "ddp",
            "sites": [{"pool": "lab-a", "nodes": 2, "procs_per_node": 1}, {"pool": "cloud-b", "procs_per_node": 2}],
            "sync": {"algorithm": "diloco", "every": 10, "timeout_seconds": 30, "min_sites": 2},
            "data": {"dataset": "digits", "batch_size": 32},
            "train": {"max_steps": 30, "epochs": 1000, "log_every_steps": 10}}
    response = user_client.post("/api/jobs", data, content_type="application/json")
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    done = finished(job, timeout=240)
    assert done.status == "succeeded", done.error
    places = {m.node_rank: m.worker.hostname for m in GangMember.objects.filter(job=job).select_related("worker")}
    assert sorted(places[p] for p in (0, 1)) == ["lab-a@1", "lab-a@2"] and places[2] == "cloud-b@1"
    text = "\n".join(line.text for line in read_lines(job.pk, limit=100000))
    # node 1 of lab-a ran its own torchrun, joined to node 0's through the site's rendezvous
    assert "[site lab-a] attempt 1: node 1 of site lab-a starting" in text
    assert "--nnodes 2 --nproc-per-node 1 --node-rank 1 --rdzv-backend c10d" in text
    # one DDP world of two ranks across the two torchruns (one rank each), node 0 running rank 0
    assert "strategy diloco over ddp (site 0: lab-a), 2 rank(s)" in text
    assert "[site lab-a] rank 0/2 ready" in text and "[site lab-a] rank 1/2 ready" in text
    node1 = (live_settings.TRAINHUB_RUNS_DIR / f"job-{job.pk}" / "logs" / "site-node1.out").read_text()
    assert "rank 1/2 ready" in node1 and "rank 0/2 ready" not in node1  # node 1's own output file
    assert "[site cloud-b]" in text and "step 30/30" in text
    assert metric_values(job, "sync_outer_step") == [1, 2, 3]
    assert metric_values(job, "cloud-b/sync_outer_step") == [1, 2, 3]
    assert set(metric_values(job, "sync_participants")) == {2}
    runs = live_settings.TRAINHUB_RUNS_DIR
    assert sites.same_weights(sites.final_weights(runs / f"job-{job.pk}", 30),
                              sites.final_weights(runs / f"job-{job.pk}-site-cloud-b", 30))
    wait_for(lambda: not lighthouses(job), timeout=15, message="the lighthouse to stop")
