"""The ``slurm_cluster`` fixture: one real two-node Slurm cluster for the session (tests/slurm_cluster.py)."""
from __future__ import annotations

import os

import pytest

from tests.slurm_cluster import Cluster, accounting_missing, missing


@pytest.fixture(scope="session")
def slurm_cluster_handle(tmp_path_factory):
    why = missing()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Slurm tests cannot run: {why}")
        pytest.skip(f"Slurm tests skipped: {why}")
    # Accounting (slurmdbd on the local MariaDB) lets sacct say who cancelled a job; required in CI
    no_accounting = accounting_missing()
    if no_accounting and os.environ.get("CI") == "true":
        pytest.fail(f"the Slurm test cluster needs accounting in CI: {no_accounting}")
    # a short path: slurmd's and munged's socket paths must fit in sun_path (108 bytes)
    cluster = Cluster(tmp_path_factory.mktemp("slurm", numbered=True), accounting=no_accounting is None)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def slurm_cluster(slurm_cluster_handle) -> str:
    """The running cluster's SLURM_CONF."""
    return str(slurm_cluster_handle.conf)


def operator_cancel_reason(cluster: Cluster) -> str:
    """How a job scancel'ed as root outside TrainHub ends: who did it, when accounting can say."""
    if cluster.database:
        return "cancelled in Slurm by root, outside TrainHub (scancel)"
    return "cancelled outside TrainHub (scancel; who did it only Slurm's accounting, sacct, would say)"


@pytest.fixture(autouse=True)
def _no_slurm_job_outlives_its_test(request):
    """A worker that shuts down leaves its Slurm jobs running (another worker adopts them): the
    cluster is emptied after each test that used it, so the next finds its nodes free."""
    yield
    if "slurm_cluster_handle" in request.fixturenames:
        request.getfixturevalue("slurm_cluster_handle").run("scancel", "--full", "--user=root", check=False)
