"""FedML configs: translated where TrainHub can honour them, refused by name where not."""
from __future__ import annotations

import pytest

from workers.runner.config import SpecError, parse_spec

FEDML = {
    "common_args": {"training_type": "simulation", "random_seed": 7, "config_version": "release"},
    "data_args": {"dataset": "digits", "data_cache_dir": "~/fedml_data"},
    "model_args": {"model": "lr"},
    "train_args": {"epochs": 4, "batch_size": 16, "client_optimizer": "sgd", "learning_rate": 0.05,
                   "weight_decay": 0.001, "comm_round": 1},
    "validation_args": {"frequency_of_the_test": 1},
    "device_args": {"using_gpu": False, "gpu_id": 0},
    "comm_args": {"backend": "sp"},
    "tracking_args": {"log_file_dir": "./log", "enable_wandb": False},
}


def test_a_centrally_trainable_fedml_config_becomes_a_spec():
    spec = parse_spec(FEDML)

    assert spec.mode == "centralized"
    assert (spec.data.dataset, spec.data.batch_size) == ("digits", 16)
    assert spec.model.name == "logreg"
    assert (spec.train.epochs, spec.train.lr, spec.train.optimizer, spec.train.seed) == (4, 0.05, "sgd", 7)
    assert spec.train.weight_decay == 0.001


def test_trainhub_keys_beside_the_fedml_sections_win():
    spec = parse_spec({**FEDML, "name": "fed", "mode": "ddp", "resources": {"procs_per_node": 2},
                       "train": {"max_steps": 5}})
    assert (spec.name, spec.mode, spec.world_size, spec.train.max_steps, spec.train.epochs) == ("fed", "ddp", 2, 5, 4)


def test_federated_settings_are_refused_by_name_never_dropped():
    config = {**FEDML, "train_args": {**FEDML["train_args"], "client_num_in_total": 1000,
                                      "client_num_per_round": 10, "comm_round": 200},
              "comm_args": {"backend": "MQTT_S3"},
              "data_args": {"dataset": "digits", "partition_method": "hetero"}}
    with pytest.raises(SpecError) as err:
        parse_spec(config)
    errors = err.value.errors

    assert errors["train_args.client_num_in_total"] == "federated setting; TrainHub trains centrally — remove it"
    assert "client_num_per_round" in " ".join(errors)
    assert "comm_round: 1" in errors["train_args.comm_round"]
    assert "MQTT_S3" in errors["comm_args.backend"]
    assert "federated" in errors["data_args.partition_method"]


@pytest.mark.parametrize("section, key, value, words", [
    ("data_args", "dataset", "mnist", "use digits"),
    ("model_args", "model", "resnet56", "no TrainHub equivalent"),
    ("tracking_args", "enable_wandb", True, "reaches nothing outside"),
    ("common_args", "using_mlops", True, "self-hosted"),
    ("environment_args", "bootstrap", "config/bootstrap.sh", "bootstrap"),
    ("train_args", "mystery_knob", 3, "not a FedML setting TrainHub can translate"),
])
def test_untranslatable_values_name_the_key_and_the_fix(section, key, value, words):
    with pytest.raises(SpecError) as err:
        parse_spec({**FEDML, section: {**FEDML.get(section, {}), key: value}})
    assert words in err.value.errors[f"{section}.{key}"]


def test_using_gpu_asks_for_one_gpu():
    spec = parse_spec({**FEDML, "device_args": {"using_gpu": True}})
    assert spec.resources.gpus_per_node == 1


@pytest.mark.slow
def test_a_fedml_config_file_runs_as_is(tmp_path):
    from tests.runner.conftest import run_module, write_spec
    from workers.runner.report import read_events

    config = write_spec(tmp_path, FEDML, "fedml_config.yaml")
    out = run_module(["--config", str(config), "--run-dir", str(tmp_path / "run")], tmp_path)

    assert out.returncode == 0, out.stderr[-2000:]
    assert "epoch 4/4" in out.stdout
    assert read_events(tmp_path / "run")[0][-1]["status"] == "succeeded"
