"""FedML cross_cloud (FedAvg over sites) becomes a localsgd cross-site job; what it cannot honour is refused by name."""
import pytest

from workers.runner.config import parse_spec
from workers.runner.errors import SpecError

CROSS_CLOUD = {
    "common_args": {"training_type": "cross_cloud", "scenario": "horizontal", "using_mlops": False, "random_seed": 3},
    "data_args": {"dataset": "digits"},
    "model_args": {"model": "mlp"},
    "train_args": {"federated_optimizer": "FedAvg", "client_num_in_total": 2, "client_num_per_round": 2,
                   "comm_round": 5, "epochs": 2, "batch_size": 32, "client_optimizer": "adam", "learning_rate": 0.01},
    "comm_args": {"backend": "MQTT_S3"},
    "sites": [{"pool": "lab-a"}, {"pool": "cloud-b"}],
}


def test_cross_cloud_becomes_localsgd_with_one_round_of_local_steps_between_syncs():
    spec = parse_spec(CROSS_CLOUD)
    # digits: 1797 rows, 360 for validation, 1437 to train; two sites of one rank: 719 rows each,
    # 23 batches of 32 per epoch; 2 epochs a round -> every 46; 5 rounds -> 230 steps
    assert (spec.sync.algorithm, spec.sync.every, spec.train.max_steps) == ("localsgd", 46, 230)
    assert [s.pool for s in spec.sites] == ["lab-a", "cloud-b"]
    assert (spec.train.lr, spec.train.optimizer, spec.train.seed, spec.data.batch_size) == (0.01, "adam", 3, 32)


def test_cross_cloud_without_sites_is_refused_with_the_fix():
    config = {k: v for k, v in CROSS_CLOUD.items() if k != "sites"}
    with pytest.raises(SpecError) as exc:
        parse_spec(config)
    assert "sites" in exc.value.errors["common_args.training_type"]


def test_transport_settings_a_client_count_that_is_not_the_sites_and_unknown_keys_are_refused_by_name():
    config = {**CROSS_CLOUD, "comm_args": {"backend": "MQTT_S3", "mqtt_config_path": "mqtt.yaml"},
              "train_args": {**CROSS_CLOUD["train_args"], "client_num_in_total": 10, "server_lr": 0.1,
                             "frobnicate": 1}}
    with pytest.raises(SpecError) as exc:
        parse_spec(config)
    errors = exc.value.errors
    assert "lighthouse" in errors["comm_args.mqtt_config_path"]
    assert "10 clients but 2 sites" in errors["train_args.client_num_in_total"]
    assert "diloco" in errors["train_args.server_lr"]
    assert "remove it" in errors["train_args.frobnicate"]
