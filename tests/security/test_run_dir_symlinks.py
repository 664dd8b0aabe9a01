"""A job's code owns its run directory and may fill it with symlinks; the web must never follow them.

Real script jobs on a real worker: one swaps its whole run directory for a link to ``/``, one
plants ``leak -> /etc`` (and a file link to /etc/passwd) inside it. Then the files API (one
file, listings, tar) and the job page's file list must show nothing from outside.
"""
from __future__ import annotations

import pytest

from tests.conftest import wait_for

pytestmark = pytest.mark.slow

SWAP_RUN_DIR = """
import os
run = os.environ["TRAINHUB_RUN_DIR"]
os.rename(run, run + "-moved")
os.symlink("/", run)
print("swapped", flush=True)
"""
PLANT_LINKS = """
import os
run = os.environ["TRAINHUB_RUN_DIR"]
os.symlink("/etc", os.path.join(run, "leak"))
os.symlink("/etc/passwd", os.path.join(run, "passwd"))
os.makedirs(os.path.join(run, "checkpoints", "step-1"))
os.symlink("/etc", os.path.join(run, "checkpoints", "step-1", "etc"))
os.symlink("/etc", os.path.join(run, "checkpoints", "step-2"))
open(os.path.join(run, "mine.txt"), "w").write("my own file")
print("planted", flush=True)
"""


def run_script(user, tmp_path, name: str, code: str):
    from trainhub.jobs.models import Job
    from trainhub.jobs.services import job_submit
    from trainhub.pools.models import Workspace

    workspace = tmp_path / name
    workspace.mkdir()
    (workspace / "job.py").write_text(code)
    Workspace.objects.create(name=name, path=str(workspace))
    job = job_submit(owner=user, data={"mode": "script", "script": {"workspace": name, "entry": "job.py"}})
    done = wait_for(lambda: Job.objects.filter(pk=job.pk, status__in=["succeeded", "failed"]).first(),
                    timeout=120, message=f"job {name} to finish")
    assert done.status == "succeeded", done.error
    return done


def body_of(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def assert_refused(response) -> None:
    assert response.status_code == 404, (response.status_code, body_of(response)[:300])
    assert b"root:" not in body_of(response) and "has no file" in response.json()["detail"]


def test_a_run_dir_swapped_for_a_link_to_root_serves_nothing(start_worker, cpu_pool, user, user_client, tmp_path):
    # Unsandboxed, as on a pool whose sandbox is off or a Slurm pool: in the sandbox the run directory is a
    # mount point the job cannot move. The web's defence must hold without the sandbox.
    cpu_pool.sandbox = "off"
    cpu_pool.save(update_fields=["sandbox"])
    start_worker("cpu")
    job = run_script(user, tmp_path, "swap", SWAP_RUN_DIR)
    api = f"/api/jobs/{job.pk}"
    assert_refused(user_client.get(f"{api}/files/etc/passwd"))
    assert_refused(user_client.get(f"{api}/files/etc"))  # would be a tar of /etc
    assert user_client.get(f"{api}/artifacts").json() == []
    assert user_client.get(f"{api}/checkpoints").json() == []
    page = user_client.get(f"/jobs/{job.pk}?fragment=files").content.decode()
    assert "etc/passwd" not in page and "/files/proc" not in page


def test_links_planted_in_a_run_dir_are_not_followed(start_worker, cpu_pool, user, user_client, tmp_path):
    start_worker("cpu")
    job = run_script(user, tmp_path, "plant", PLANT_LINKS)
    api = f"/api/jobs/{job.pk}"
    for path in ("leak/passwd", "leak", "passwd", "checkpoints/step-1/etc/passwd", "checkpoints/step-2"):
        assert_refused(user_client.get(f"{api}/files/{path}"))
    assert [a["path"] for a in user_client.get(f"{api}/artifacts").json()
            if not a["path"].startswith(("job", "events", "logs"))] == ["mine.txt"]
    assert [(c["name"], c["files"]) for c in user_client.get(f"{api}/checkpoints").json()] == [("step-1", [])]
    tar = user_client.get(f"{api}/files/checkpoints/step-1")
    assert tar.status_code == 200 and b"root:" not in body_of(tar) and b"etc/" not in body_of(tar)
    page = user_client.get(f"/jobs/{job.pk}?fragment=files").content.decode()
    assert "mine.txt" in page and "leak" not in page and "passwd" not in page
    assert user_client.get(f"{api}/files/mine.txt").status_code == 200
