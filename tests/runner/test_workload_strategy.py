"""workload × strategy, and mode: the older single word for the pair, kept working everywhere."""
from __future__ import annotations

import pytest

from workers.runner import launch
from workers.runner.config import MODES, SpecError, dump_yaml, load_text, parse_spec
from workers.runner.workloads import WORKLOADS

DS = {"resources": {"procs_per_node": 2}, "deepspeed": {"zero_stage": 2}, "llm": {"size": "tiny"}}


def errors_of(data: dict) -> dict[str, str]:
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    return err.value.errors


def test_workload_llm_under_strategy_deepspeed_runs_the_same_as_mode_llm_with_strategy_deepspeed(tmp_path):
    new = parse_spec({"name": "x", "workload": "llm", "strategy": "deepspeed", **DS})
    old = parse_spec({"name": "x", "mode": "llm", "strategy": "deepspeed", **DS})
    assert new == old and (new.workload, new.strategy, new.mode) == ("llm", "deepspeed", "llm")
    assert dump_yaml(new) == dump_yaml(old)
    config, run_dir = tmp_path / "job.yaml", tmp_path / "run"
    assert launch.argv(new, config, run_dir) == launch.argv(old, config, run_dir)
    assert launch.env(new, run_dir, base={}) == launch.env(old, run_dir, base={})
    assert WORKLOADS[new.workload] == WORKLOADS["llm"]


def test_every_mode_means_a_workload_under_a_strategy():
    meant = {m: (s.workload, s.strategy) for m in ("centralized", "ddp", "deepspeed", "llm")
             for s in [parse_spec({"mode": m})]}
    assert meant == {"centralized": ("classify", "single"), "ddp": ("classify", "ddp"),
                     "deepspeed": ("classify", "deepspeed"), "llm": ("llm", "single")}
    script = parse_spec({"mode": "script", "script": {"workspace": "w", "entry": "train.py"}})
    assert (script.workload, script.strategy) == ("script", None)


def test_mode_and_a_conflicting_workload_are_refused_by_name():
    errors = errors_of({"mode": "ddp", "workload": "llm"})
    assert list(errors) == ["workload"] and "mode ddp already means workload classify" in errors["workload"]


def test_mode_and_a_conflicting_strategy_are_refused_with_the_spelling_that_works():
    errors = errors_of({"mode": "ddp", "strategy": "deepspeed"})
    assert "write workload: classify with strategy: deepspeed and no mode" in errors["strategy"]


def test_mode_with_the_workload_and_strategy_it_means_is_accepted():
    assert parse_spec({"mode": "ddp", "workload": "classify", "strategy": "ddp"}).mode == "ddp"


def test_a_classify_workload_without_a_strategy_takes_it_from_resources():
    spec = parse_spec({"workload": "classify", "resources": {"procs_per_node": 2}})
    assert (spec.strategy, spec.mode) == ("ddp", "ddp")
    assert parse_spec({"workload": "classify"}).mode == "centralized"


def test_a_script_refuses_a_strategy_and_points_at_its_launcher():
    errors = errors_of({"workload": "script", "strategy": "ddp", "script": {"workspace": "w", "entry": "t.py"}})
    assert "script.launcher" in errors["strategy"]


def test_a_section_only_another_workload_or_strategy_reads_is_refused_by_name():
    assert "workload llm" in errors_of({"workload": "classify", "llm": {}})["llm"]
    assert "strategy deepspeed" in errors_of({"workload": "llm", "strategy": "ddp", "deepspeed": {},
                                              "resources": {"procs_per_node": 2}})["deepspeed"]


@pytest.mark.parametrize("data", [
    {"workload": "classify", "strategy": "deepspeed", "resources": {"procs_per_node": 2}},
    {"workload": "llm", "strategy": "ddp", "resources": {"procs_per_node": 2}},
    {"mode": "centralized"},
    {"mode": "script", "script": {"workspace": "w", "entry": "train.py", "launcher": "torchrun"}},
])
def test_a_dumped_spec_names_its_mode_for_older_readers_and_reads_back_the_same(data):
    spec = parse_spec(data)
    dumped = load_text(dump_yaml(spec))
    assert "workload" not in dumped and dumped["mode"] in MODES
    assert ("strategy" in dumped) == (spec.workload == "llm")  # older readers refuse it elsewhere
    assert parse_spec(dumped) == spec
