"""The workloads and strategies the Slurm pool's other tests do not run (classify single and
2-node DDP are in test_jobs.py): DeepSpeed and a team's torchrun script across n1 and n2, and an
LLM, through a real worker on the real cluster — tiny sizes, all three submitted at once."""
from __future__ import annotations

import pytest

from tests.conftest import wait_for
from tests.e2e.test_every_mode_through_a_worker import TRAIN_PY
from tests.slurm.test_jobs import final, log_text, slurm_pool, slurm_worker, submit  # noqa: F401 (fixtures)
from trainhub.jobs.models import LogLine
from trainhub.pools.models import Workspace

pytestmark = [pytest.mark.slow, pytest.mark.db_agnostic]
TWO_NODES = {"nodes": 2, "procs_per_node": 1}
SPECS = {
    "deepspeed": {"mode": "deepspeed", "resources": TWO_NODES, "data": {"dataset": "iris"},
                  "model": {"name": "logreg"}, "train": {"epochs": 1}, "deepspeed": {"zero_stage": 2}},
    "llm": {"mode": "llm", "train": {"epochs": 1, "max_steps": 6, "log_every_steps": 2},
            "llm": {"seq_len": 32, "sample_tokens": 8}},
    "script": {"mode": "script", "resources": TWO_NODES,
               "script": {"workspace": "team", "entry": "train.py", "launcher": "torchrun",
                          "args": ["--lr", "0.1; rm -rf /"]}},
}


def test_deepspeed_and_a_script_across_both_nodes_and_an_llm_succeed_on_slurm(slurm_worker, user_client,  # noqa: F811
                                                                                 tmp_path):
    (tmp_path / "train.py").write_text(TRAIN_PY)
    Workspace.objects.create(name="team", path=str(tmp_path))
    ids = {name: submit(user_client, {"name": f"{name} on slurm", "pool": "hpc", **spec})
           for name, spec in SPECS.items()}
    jobs = {name: wait_for(lambda pk=pk: final(pk), timeout=420, message=f"the {name} job to finish")
            for name, pk in ids.items()}
    logs = {name: log_text(pk) for name, pk in ids.items()}
    for name, job in jobs.items():
        assert job.status == "succeeded", (name, job.error, logs[name][-3000:])
    for name in ("deepspeed", "script"):
        assert "on n1,n2" in logs[name], logs[name][-2000:]
        assert {0, 1} <= set(LogLine.objects.filter(job_id=ids[name]).values_list("rank", flat=True)), name
    assert "team script rank 0 of 2" in logs["script"] and "team script rank 1 of 2" in logs["script"]
    assert "args=['--lr', '0.1; rm -rf /']" in logs["script"]  # one inert argument through sbatch and srun
    assert "perplexity" in logs["llm"].lower()
