"""Two sites of one job as real processes on this machine (torchrun + torchft, gloo), without Django:
they sync through a lighthouse, report sync metrics, and end with identical weights."""
from __future__ import annotations

import pytest

from tests.crosssite import sites
from workers.runner.report import read_events

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("algorithm", ["diloco", "localsgd"])
def test_two_sites_sync_and_end_with_identical_weights(tmp_path, algorithm):
    spec = sites.spec(algorithm, every=10, max_steps=60)
    port = sites.free_port()
    lighthouse = sites.start_lighthouse(port)
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
