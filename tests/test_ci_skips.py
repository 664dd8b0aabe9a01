"""Under CI=true a test that cannot run for want of a service fails the run; locally it is skipped."""
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.no_db]


def test_probe_skips_only_when_told():
    if os.environ.get("TRAINHUB_TEST_FORCE_SKIP"):
        pytest.skip("the probe's service is missing (forced by the test)")


def _pytest(*args: str, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "DATABASE_URL")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=300)


def test_a_missing_service_fails_the_run_under_ci():
    run = _pytest("tests/test_ci_skips.py::test_probe_skips_only_when_told", CI="true", TRAINHUB_TEST_FORCE_SKIP="1")
    assert run.returncode == 1, run.stdout
    assert "CI=true: this test needs something that is missing here" in run.stdout
    assert "the probe's service is missing" in run.stdout


def test_a_missing_service_is_a_skip_locally():
    run = _pytest("tests/test_ci_skips.py::test_probe_skips_only_when_told", TRAINHUB_TEST_FORCE_SKIP="1")
    assert run.returncode == 0, run.stdout
    assert "1 skipped" in run.stdout


def test_the_other_databases_fault_test_is_an_expected_skip_under_ci():
    run = _pytest("tests/faults/test_postgres_outage.py", CI="true")  # on SQLite: its half runs in the PG pass
    assert run.returncode == 0, run.stdout
    assert "skipped" in run.stdout and "failed" not in run.stdout


def test_a_run_whose_scheduler_drops_tests_fails_saying_how_many_never_ran():
    # --dist loadfile schedules by node id; the schema fuzz test's 15 items share one (schemathesis under
    # pytest 9.2), so it runs one of them. `make test` uses worksteal; this is the guard for the next such case.
    run = _pytest("-n", "2", "--dist", "loadfile", "tests/api/test_schema_fuzz.py")
    assert run.returncode == 1, run.stdout
    assert "15 tests were collected but only 1 reported an outcome: 14 never ran" in run.stdout
