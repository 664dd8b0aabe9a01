"""What a user sees when a spec cannot run: the field, what is wrong, how to fix it."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.runner.conftest import ROOT
from workers.runner import dsconfig
from workers.runner.config import SpecError, parse_spec
from workers.runner.preflight import preflight


def errors_of(data: dict) -> dict[str, str]:
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    return err.value.errors


def test_cnn_on_a_table_is_refused_with_the_models_that_fit():
    message = errors_of({"data": {"dataset": "wine"}, "model": {"name": "cnn"}})["model.name"]
    assert "image-shaped" in message and "use mlp or logreg" in message


def test_a_deepspeed_override_that_contradicts_the_batch_size_is_refused_by_name():
    errors = errors_of({"mode": "deepspeed", "data": {"batch_size": 32},
                        "deepspeed": {"overrides": {"train_micro_batch_size_per_gpu": 16}}})
    message = errors["deepspeed.overrides.train_micro_batch_size_per_gpu"]
    assert "conflicts with data.batch_size" in message and "32" in message


def test_a_deepspeed_override_with_the_same_value_or_a_new_key_is_merged():
    spec = parse_spec({"mode": "deepspeed", "data": {"batch_size": 32}, "deepspeed": {"zero_stage": 3, "overrides": {
        "train_micro_batch_size_per_gpu": 32, "zero_optimization": {"stage3_max_live_parameters": 1000}}}})
    cfg = dsconfig.build(spec)
    assert cfg["zero_optimization"] == {"stage": 3, "stage3_max_live_parameters": 1000}


def test_an_optimizer_section_in_overrides_is_refused():
    errors = errors_of({"mode": "deepspeed", "deepspeed": {"overrides": {"optimizer": {"type": "Adam"}}}})
    assert "train.optimizer" in errors["deepspeed.overrides.optimizer.type"]


@pytest.mark.parametrize("section, field, words", [
    ({"zero_stage": 2, "offload_params": True}, "deepspeed.offload_params", "zero_stage: 3"),
    ({"zero_stage": 0, "offload_optimizer": True}, "deepspeed.offload_optimizer", "1, 2 or 3"),
    ({"precision": "fp16"}, "deepspeed.precision", "bf16 or fp32 on CPU"),
])
def test_impossible_deepspeed_settings_say_how_to_fix_them(section, field, words):
    assert words in errors_of({"mode": "deepspeed", "deepspeed": section})[field]


def test_offload_and_bf16_with_zero3_are_accepted():
    spec = parse_spec({"mode": "deepspeed", "deepspeed": {"zero_stage": 3, "precision": "bf16",
                                                          "offload_optimizer": True, "offload_params": True}})
    cfg = dsconfig.build(spec)
    assert cfg["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert cfg["bf16"] == {"enabled": True}


def test_unknown_keys_and_wrong_types_name_the_field():
    errors = errors_of({"train": {"lr": "fast", "epoch": 3}})
    assert set(errors) == {"train.lr", "train.epoch"}
    assert "unknown key" in errors["train.epoch"]


def test_preflight_refuses_more_gpus_than_the_pool_has():
    spec = parse_spec({"mode": "ddp", "resources": {"procs_per_node": 2, "gpus_per_node": 2}})
    with pytest.raises(SpecError) as err:
        preflight(spec, gpus_available=1)
    assert "this pool's machines have 1" in err.value.errors["resources.gpus_per_node"]
    preflight(spec, gpus_available=8)
    preflight(spec, gpus_available=None)


def test_preflight_refuses_paths_that_do_not_exist(tmp_path):
    spec = parse_spec({"mode": "llm", "data": {"path": str(tmp_path / "missing.txt")}})
    with pytest.raises(SpecError) as err:
        preflight(spec, gpus_available=0)
    assert "does not exist" in err.value.errors["data.path"]


def test_preflight_checks_the_script_entry_in_the_workspace(tmp_path):
    spec = parse_spec({"mode": "script", "script": {"workspace": "w", "entry": "train.py"}})
    with pytest.raises(SpecError) as err:
        preflight(spec, gpus_available=0, workspace_dir=tmp_path)
    assert "not found" in err.value.errors["script.entry"]


def test_spec_validation_and_preflight_do_not_import_torch():
    code = ("import sys\nfrom workers.runner.config import parse_spec\nfrom workers.runner.preflight import preflight\n"
            "preflight(parse_spec({'mode': 'deepspeed', 'deepspeed': {'zero_stage': 3}}), 0)\n"
            "import workers.runner, workers.runner.launch\n"
            "print(sorted(m for m in ('torch', 'deepspeed', 'django', 'celery') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr


def test_a_one_process_spec_under_torchrun_with_two_ranks_is_refused_saying_how_to_run_it(monkeypatch):
    from workers.runner.arguments import load_arguments

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SpecError) as refused:
        load_arguments({"name": "digits-mlp", "mode": "centralized"})
    message = refused.value.errors["resources"]
    assert "runs 1 process(es) (mode centralized" in message and "2 were started" in message
    assert "python -m workers.runner" in message and "mode: ddp" in message
    assert load_arguments({"mode": "ddp", "resources": {"procs_per_node": 2}}).world_size == 2
    monkeypatch.setenv("WORLD_SIZE", "1")  # one rank of a ddp spec, as without a launcher: allowed
    assert load_arguments({"mode": "ddp", "resources": {"procs_per_node": 2}}).world_size == 1
    monkeypatch.delenv("WORLD_SIZE")
    assert load_arguments({"mode": "centralized"}).world_size == 1


def test_the_notify_on_key_survives_a_client_that_read_the_yaml_and_sent_json():
    import json

    import yaml

    text = "name: n\nnotify:\n  email: true\n  on: [failed, cancelled]\n"  # docs/NOTIFICATIONS.md's block
    as_sent = json.loads(json.dumps(yaml.safe_load(text)))  # what `trainhub submit` POSTs: {"true": [...]}
    assert as_sent["notify"]["true"] == ["failed", "cancelled"]
    assert parse_spec(as_sent).notify.on == ["failed", "cancelled"]
    assert "notify.on" in errors_of({"notify": {"on": ["failed"], "true": ["failed"]}})
