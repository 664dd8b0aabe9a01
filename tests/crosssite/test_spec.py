"""The cross-site parts of the spec: sites and sync, refused by field name with the fix."""
import pytest

from workers.runner.config import dump_yaml, load_text, parse_spec
from workers.runner.errors import SpecError

pytestmark = pytest.mark.no_db

BASE = {"name": "cs", "mode": "ddp", "sites": [{"pool": "lab-a", "procs_per_node": 2}, {"pool": "cloud-b", "nodes": 2}],
        "sync": {"algorithm": "diloco", "every": 50, "outer_lr": 0.7, "outer_momentum": 0.9},
        "train": {"max_steps": 500}}


def refused(**changes) -> dict[str, str]:
    data = {**BASE, **changes}
    with pytest.raises(SpecError) as exc:
        parse_spec({k: v for k, v in data.items() if v is not None})
    return exc.value.errors


def test_a_cross_site_spec_runs_on_its_first_sites_pool_and_each_site_sees_its_own_resources():
    spec = parse_spec(BASE)
    assert (spec.pool, spec.resources.procs_per_node) == ("lab-a", 2)
    site = spec.for_site(1)
    assert (site.pool, site.resources.nodes, site.resources.procs_per_node) == ("cloud-b", 2, 1)
    again = parse_spec(load_text(dump_yaml(site)))  # what the worker writes for the site is a valid spec
    assert (again.pool, again.resources.nodes) == ("cloud-b", 2)
    assert parse_spec(load_text(dump_yaml(spec))).sync.every == 50


def test_sites_without_sync_and_sync_without_sites_are_refused_by_name():
    assert "sync" in refused(sync=None)
    assert "sites" in refused(sites=None)


def test_one_site_sites_of_different_sizes_and_a_pool_twice_are_refused():
    assert "at least two sites" in refused(sites=[{"pool": "a"}])["sites"]
    assert "same number of ranks" in refused(sites=[{"pool": "a"}, {"pool": "b", "procs_per_node": 3}])["sites.1.procs_per_node"]
    assert "already holds site 0" in refused(sites=[{"pool": "a"}, {"pool": "a"}])["sites.1.pool"]


def test_a_run_must_end_on_a_sync():
    assert "multiple of sync.every (50)" in refused(train={"max_steps": 120})["train.max_steps"]
    assert "train.max_steps" in refused(train={})


def test_localsgd_refuses_outer_optimizer_settings_and_unknown_keys_are_named():
    errors = refused(sync={"algorithm": "localsgd", "every": 50, "outer_lr": 0.5})
    assert "no outer optimizer" in errors["sync.outer_lr"]
    assert refused(sync={"algorithm": "fedprox", "every": 50}).keys() == {"sync.algorithm"}
    assert "unknown key" in refused(sites=[{"pool": "a", "gpu": 1}, {"pool": "b"}])["sites.0.gpu"]


def test_a_pool_or_resources_beside_sites_and_deepspeed_inside_a_site_are_refused():
    assert "remove pool" in refused(pool="elsewhere")["pool"]
    assert "remove resources" in refused(resources={"nodes": 7})["resources"]
    errors = refused(mode=None, workload="classify", strategy="deepspeed")
    assert "deepspeed" in errors["strategy"]
