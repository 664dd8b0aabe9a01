"""Two sites of one job as real processes on this machine (torchrun + torchft, gloo), without Django:
they sync through a lighthouse, report sync metrics, and end with identical weights."""
from __future__ import annotations

import subprocess

import pytest

from tests.conftest import wait_for
from tests.crosssite import sites
from workers.runner import launch
from workers.runner.config import dump_yaml, parse_spec
from workers.runner.report import read_events

pytestmark = [pytest.mark.slow, pytest.mark.no_db]


@pytest.mark.parametrize("algorithm", ["diloco", "localsgd"])
def test_two_sites_sync_and_end_with_identical_weights(tmp_path, algorithm):
    # both sites in every sync: on a loaded machine one site may start long after the other, and
    # with min_sites 1 the first would sync alone (the late one then heals: the kill test covers that)
    spec = sites.spec(algorithm, every=10, max_steps=60, min_sites=2)
    port = sites.free_port()
    lighthouse = sites.start_lighthouse(port, min_replicas=2)
    try:
        procs = [sites.start_site(spec, i, tmp_path / f"site{i}", f"http://localhost:{port}") for i in range(2)]
        codes = [p.wait(timeout=400) for p in procs]
    finally:
        lighthouse.kill()
        lighthouse.wait()
    assert codes == [0, 0], (tmp_path / "site0" / "out.log").read_text()[-3000:]
    assert sites.same_weights(sites.final_weights(tmp_path / "site0", 60), sites.final_weights(tmp_path / "site1", 60))
    for i in range(2):
        metrics = [e["values"] for e in read_events(tmp_path / f"site{i}")[0] if e["type"] == "metrics"]
        syncs = [m for m in metrics if "sync_outer_step" in m]
        assert [m["sync_outer_step"] for m in syncs] == [1, 2, 3, 4, 5, 6]  # every 10 steps, all committed
        assert all(m["sync_participants"] == 2 and m["sync_bytes"] > 0 for m in syncs)
        assert metrics[-1]["val_acc"] > 0.7  # digits, 60 steps: it learns


def test_diloco_over_two_sites_learns_about_as_well_as_one_site_of_two_ranks(tmp_path):
    """The same total steps and global batch: one DDP site of two ranks against two one-rank sites
    syncing every 10 steps. DiLoCo sees H× fewer syncs; on digits it must still reach a close accuracy."""
    single = parse_spec({"name": "one-site", "mode": "ddp", "resources": {"procs_per_node": 2},
                         "train": {"max_steps": 60, "epochs": 1000, "log_every_steps": 10},
                         "data": {"dataset": "digits", "batch_size": 32}})
    run_dir = tmp_path / "single"
    run_dir.mkdir()
    (run_dir / "job.yaml").write_text(dump_yaml(single))
    done = subprocess.run(launch.argv(single, run_dir / "job.yaml", run_dir), env=launch.env(single, run_dir),
                          cwd=run_dir, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-2000:]
    spec = sites.spec("diloco", every=10, max_steps=60, min_sites=2)
    port = sites.free_port()
    lighthouse = sites.start_lighthouse(port, min_replicas=2)
    try:
        procs = [sites.start_site(spec, i, tmp_path / f"site{i}", f"http://localhost:{port}") for i in range(2)]
        assert [p.wait(timeout=400) for p in procs] == [0, 0]
    finally:
        lighthouse.kill()
        lighthouse.wait()

    def final(d):
        return [e["values"] for e in read_events(d)[0] if e["type"] == "metrics" and "val_acc" in e["values"]][-1]
    one, two = final(run_dir), final(tmp_path / "site0")
    print(f"single site: val_loss {one['val_loss']:.4f} val_acc {one['val_acc']:.4f}; "
          f"diloco two sites: val_loss {two['val_loss']:.4f} val_acc {two['val_acc']:.4f}")
    assert two["val_acc"] >= one["val_acc"] - 0.1


def test_an_llm_job_runs_under_diloco_over_two_sites(tmp_path):
    spec = sites.spec("diloco", every=5, max_steps=20, min_sites=2, mode="llm",
                      llm={"size": "tiny", "seq_len": 32, "sample_tokens": 8}, data={"batch_size": 4},
                      train={"max_steps": 20, "epochs": 100, "log_every_steps": 5})
    port = sites.free_port()
    lighthouse = sites.start_lighthouse(port, min_replicas=2)
    try:
        procs = [sites.start_site(spec, i, tmp_path / f"site{i}", f"http://localhost:{port}") for i in range(2)]
        assert [p.wait(timeout=600) for p in procs] == [0, 0], (tmp_path / "site0" / "out.log").read_text()[-3000:]
    finally:
        lighthouse.kill()
        lighthouse.wait()
    assert sites.same_weights(sites.final_weights(tmp_path / "site0", 20), sites.final_weights(tmp_path / "site1", 20))
    metrics = [e["values"] for e in read_events(tmp_path / "site1")[0] if e["type"] == "metrics"]
    assert [m["sync_outer_step"] for m in metrics if "sync_outer_step" in m] == [1, 2, 3, 4]


def heartbeating(port: int) -> str:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://localhost:{port}/status", timeout=5) as response:
            return response.read().decode()
    except OSError:
        return ""  # not up yet


def syncs(run_dir) -> list[dict]:
    return [e["values"] for e in read_events(run_dir)[0] if e["type"] == "metrics" and "sync_outer_step" in e["values"]]


def test_a_site_that_starts_late_is_waited_for_so_both_train_together_from_the_first_sync(tmp_path):
    # min_sites 1, as a job has by default: torchft alone would let lab-a, heartbeating first, sync
    # alone and train its 60 steps (well under a second) before cloud-b's process has imported torch
    spec = sites.spec("diloco", every=10, max_steps=60)
    port = sites.free_port()
    lighthouse = sites.start_lighthouse(port)
    try:
        first = sites.start_site(spec, 0, tmp_path / "site0", f"http://localhost:{port}")
        wait_for(lambda: "lab-a_0:" in heartbeating(port), timeout=120, message="lab-a's manager to heartbeat")
        second = sites.start_site(spec, 1, tmp_path / "site1", f"http://localhost:{port}")
        codes = [first.wait(timeout=400), second.wait(timeout=400)]
    finally:
        lighthouse.kill()
        lighthouse.wait()
    assert codes == [0, 0], (tmp_path / "site0" / "out.log").read_text()[-3000:]
    for i in range(2):  # both sites in every sync, the first included
        assert [(m["sync_outer_step"], m["sync_participants"]) for m in syncs(tmp_path / f"site{i}")] == [
            (n, 2) for n in range(1, 7)]
    assert sites.same_weights(sites.final_weights(tmp_path / "site0", 60), sites.final_weights(tmp_path / "site1", 60))


def test_a_site_that_never_starts_is_waited_for_only_the_sync_timeout(tmp_path):
    spec = sites.spec("diloco", every=10, max_steps=20, timeout_seconds=5)
    port = sites.free_port()
    lighthouse = sites.start_lighthouse(port, join_timeout_ms=5000)
    try:
        alone = sites.start_site(spec, 0, tmp_path / "site0", f"http://localhost:{port}")
        assert alone.wait(timeout=400) == 0, (tmp_path / "site0" / "out.log").read_text()[-3000:]
    finally:
        lighthouse.kill()
        lighthouse.wait()
    out = (tmp_path / "site0" / "out.log").read_text()
    assert "site lab-a: cloud-b_1 not started after 5 s (sync.timeout_seconds); training without them" in out, out
    assert [m["sync_participants"] for m in syncs(tmp_path / "site0")] == [1, 1]
