"""Two test runs against one database server at once (two clones' `make test` on one machine, or a test run by hand
while `make test` runs): each run has a test database of its own (SQLite: a file per process; PostgreSQL: a
database per process, trainhub/settings.py), so neither breaks the other's tests."""
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

PROBE = "tests/concurrent_run_probe.py"


def _start(marker, hold: float) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not this run's xdist worker
    env.update(TRAINHUB_PROBE_MARKER=str(marker), TRAINHUB_PROBE_HOLD_SECONDS=str(hold))
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", PROBE],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_second_run_beside_a_first_leaves_the_first_ones_database_alone(tmp_path):
    first_marker, second_marker = tmp_path / "first", tmp_path / "second"
    first = _start(first_marker, hold=120)
    try:
        deadline = time.monotonic() + 120
        while not first_marker.exists():  # the first run's row is stored and its test waits
            assert first.poll() is None, first.communicate()[0]
            assert time.monotonic() < deadline, "the first run did not get to its test"
            time.sleep(0.1)
        second = _start(second_marker, hold=0)  # creates its test database, runs, drops it
        second_out = second.communicate(timeout=300)[0]
        assert second.returncode == 0 and "1 passed" in second_out, second_out
        (tmp_path / "first.release").write_text("")
        first_out = first.communicate(timeout=300)[0]
        assert first.returncode == 0 and "1 passed" in first_out, first_out
    finally:
        first.kill()
