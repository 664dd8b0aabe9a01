"""Every mode submitted through the REST API runs on a real Celery worker and succeeds."""
import pytest

from tests.conftest import wait_for
from trainhub.jobs.logs import read_lines
from trainhub.jobs.models import Job
from trainhub.pools.models import Workspace

pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]

TRAIN_PY = """
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
print(f"team script rank {rank} of {dist.get_world_size()} args={sys.argv[1:]} sum={t.item():.0f}", flush=True)
dist.destroy_process_group()
"""

SPECS = {
    "deepspeed": {"mode": "deepspeed", "resources": {"procs_per_node": 2}, "data": {"dataset": "iris"},
                  "model": {"name": "logreg"}, "train": {"epochs": 1}, "deepspeed": {"zero_stage": 2}},
    "llm": {"mode": "llm", "train": {"epochs": 1, "max_steps": 6, "log_every_steps": 2},
            "llm": {"seq_len": 32, "sample_tokens": 8}},
    "script": {"mode": "script", "resources": {"procs_per_node": 2},
               "script": {"workspace": "team", "entry": "train.py", "launcher": "torchrun",
                          "args": ["--lr", "0.1; rm -rf /"]}},
}


def test_deepspeed_llm_and_a_team_script_all_succeed_through_the_worker(start_worker, cpu_pool, user_client,
                                                                       tmp_path):
    workspace = tmp_path / "team"
    workspace.mkdir()
    (workspace / "train.py").write_text(TRAIN_PY)
    Workspace.objects.create(name="team", path=str(workspace))
    start_worker("cpu")
    ids = {}
    for name, spec in SPECS.items():
        response = user_client.post("/api/jobs", {"name": name, **spec}, content_type="application/json")
        assert response.status_code == 201, response.content
        ids[name] = response.json()["id"]

    def all_done():
        jobs = {name: Job.objects.get(pk=pk) for name, pk in ids.items()}
        return jobs if all(j.status in ("succeeded", "failed", "cancelled") for j in jobs.values()) else None

    jobs = wait_for(all_done, timeout=600, interval=1, message="every mode's job to finish")
    logs = {name: "\n".join(l.text for l in read_lines(job.pk, limit=100000)) for name, job in jobs.items()}
    for name, job in jobs.items():
        assert job.status == "succeeded", (name, job.error, logs[name][-3000:])

    ranks = {l.rank for l in read_lines(jobs["deepspeed"].pk, limit=100000)}
    assert ranks == {0, 1}
    assert "perplexity" in logs["llm"].lower()
    assert "team script rank 0 of 2" in logs["script"] and "team script rank 1 of 2" in logs["script"]
    assert "args=['--lr', '0.1; rm -rf /']" in logs["script"]  # the hostile value arrived as one inert argument
