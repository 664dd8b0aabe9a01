"""Translate a FedML ``fedml_config.yaml`` into a TrainHub spec.

Every key is either mapped (``train_args.learning_rate`` → ``train.lr``), accepted because it
changes nothing here (listed in ``_NO_EFFECT`` with the reason), or refused by name with a
fix-it message — never silently dropped. TrainHub trains centrally, so federated settings
(clients, rounds > 1, partitions, MQTT/gRPC transports, hosted MLOps) are refused.
Top-level TrainHub keys (``name``, ``pool``, ``mode``, ``resources``, ...) may sit beside the
FedML sections and win over what is translated.
"""
from __future__ import annotations

from typing import Any

from workers.runner import fedml_cross_cloud
from workers.runner.errors import SpecError

FEDML_SECTIONS = ("common_args", "data_args", "model_args", "train_args", "device_args",
                  "comm_args", "tracking_args", "environment_args", "validation_args")

_CENTRAL = "TrainHub trains centrally — remove it"
_FEDERATED = f"federated setting; {_CENTRAL}"

#: (section, key) -> (spec path, value translation or None for as-is)
_MAP = {
    ("common_args", "random_seed"): "train.seed",
    ("data_args", "dataset"): "data.dataset",
    ("model_args", "model"): "model.name",
    ("train_args", "epochs"): "train.epochs",
    ("train_args", "batch_size"): "data.batch_size",
    ("train_args", "client_optimizer"): "train.optimizer",
    ("train_args", "learning_rate"): "train.lr",
    ("train_args", "lr"): "train.lr",
    ("train_args", "weight_decay"): "train.weight_decay",
}
_MODEL_NAMES = {"lr": "logreg", "logistic_regression": "logreg", "logreg": "logreg", "mlp": "mlp", "cnn": "cnn"}
_DATASET_NAMES = {"digits": "digits", "iris": "iris", "wine": "wine", "breast_cancer": "breast_cancer",
                  "synthetic": "synthetic"}

#: keys accepted when they hold the value TrainHub behaves like anyway: (section, key) -> (ok values, why)
_NO_EFFECT = {
    ("common_args", "config_version"): (None, "metadata"),
    ("common_args", "training_type"): ({"simulation", "centralized"}, "TrainHub trains centrally; use simulation"),
    ("common_args", "scenario"): ({"horizontal"}, "only horizontal (one model, central data) is supported"),
    ("common_args", "using_mlops"): ({False}, "hosted MLOps is not used; TrainHub is self-hosted — set false"),
    ("common_args", "federated_optimizer"): ({"FedAvg"}, _FEDERATED),
    ("train_args", "federated_optimizer"): ({"FedAvg"}, _FEDERATED),
    ("train_args", "comm_round"): ({1}, "more than one federated round; TrainHub trains centrally — "
                                        "use train_args.epochs and set comm_round: 1 or remove it"),
    ("data_args", "data_cache_dir"): (None, "built-in datasets are bundled, nothing is downloaded"),
    ("device_args", "gpu_id"): ({0}, "the worker pool assigns GPUs; remove it"),
    ("device_args", "device_type"): ({"cpu", "gpu"}, "use cpu or gpu"),
    ("comm_args", "backend"): ({"sp", "single_process"}, "FedML's federated transport; TrainHub trains centrally "
                                                         "(ranks talk over torch.distributed) — remove it"),
    ("comm_args", "is_mobile"): ({0, False}, "mobile clients are federated; remove it"),
    ("tracking_args", "log_file_dir"): (None, "logs go to the job's run directory and page"),
    ("tracking_args", "enable_wandb"): ({False}, "TrainHub records metrics itself and reaches nothing outside; "
                                                 "set false or remove it"),
    ("tracking_args", "enable_tracking"): ({False, True}, ""),
    ("validation_args", "frequency_of_the_test"): ({1}, "per-round test frequency is federated; TrainHub "
                                                        "evaluates every epoch (or train.eval_every_steps)"),
}

_REFUSED = {
    "client_num_in_total": _FEDERATED, "client_num_per_round": _FEDERATED, "client_id_list": _FEDERATED,
    "client_num": _FEDERATED, "partition_method": _FEDERATED, "partition_alpha": _FEDERATED,
    "server_optimizer": _FEDERATED, "server_lr": _FEDERATED, "server_momentum": _FEDERATED,
    "worker_num": "FedML simulation processes are federated clients; set resources.procs_per_node with mode ddp instead",
    "gpu_mapping_file": "the worker pool assigns GPUs; remove it", "gpu_mapping_key": "the worker pool assigns GPUs; remove it",
    "mqtt_config_path": _FEDERATED, "s3_config_path": _FEDERATED, "grpc_ipconfig_path": _FEDERATED,
    "trpc_master_config_path": _FEDERATED, "bootstrap": "TrainHub does not run bootstrap shell scripts; install "
                                                        "dependencies on the worker and remove it",
    "wandb_key": "TrainHub reaches no outside tracking service; remove it",
    "wandb_project": "TrainHub reaches no outside tracking service; remove it",
    "wandb_name": "TrainHub reaches no outside tracking service; remove it",
    "wandb_entity": "TrainHub reaches no outside tracking service; remove it",
}


def is_fedml(data: dict[str, Any]) -> bool:
    return any(key in data for key in FEDML_SECTIONS)


def translate(data: dict[str, Any]) -> dict[str, Any]:
    """A TrainHub spec mapping from a FedML config; raises ``SpecError`` naming every refused key."""
    common = data.get("common_args")
    if isinstance(common, dict) and common.get("training_type") == "cross_cloud":
        return _translate_cross_cloud(data)
    spec: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for section in FEDML_SECTIONS:
        block = data.get(section)
        if block is None:
            continue
        if not isinstance(block, dict):
            errors[section] = "must be a mapping of keys to values"
            continue
        for key, value in block.items():
            field = f"{section}.{key}"
            message = _translate_one(section, key, value, spec)
            if message:
                errors[field] = message
    if errors:
        raise SpecError(errors)
    for key, value in data.items():
        if key in FEDML_SECTIONS:
            continue
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    spec.setdefault("name", "fedml-job")
    return spec


def _translate_cross_cloud(data: dict[str, Any]) -> dict[str, Any]:
    """``training_type: cross_cloud`` (FedAvg over sites) → localsgd over ``sites`` (fedml_cross_cloud.py)."""
    train = data.get("train_args") if isinstance(data.get("train_args"), dict) else {}
    rounds, epochs = train.get("comm_round", 1), train.get("epochs", 1)
    sites = data.get("sites") if isinstance(data.get("sites"), list) else []
    if len(sites) < 2:
        raise SpecError({"common_args.training_type": "cross_cloud needs sites beside the FedML sections, one pool "
                                                      "per cloud or lab: sites: [{pool: lab-a}, {pool: cloud-b}]"})
    rest = {**data, "common_args": {k: v for k, v in data["common_args"].items() if k != "training_type"},
            "train_args": {k: v for k, v in train.items() if k not in ("comm_round", "epochs", "client_num_in_total",
                                                                        "client_num_per_round")}}
    errors: dict[str, str] = {}
    for key in ("client_num_in_total", "client_num_per_round"):
        if key in train and train[key] != len(sites):
            errors[f"train_args.{key}"] = (f"each client is a site here: {train[key]} clients but {len(sites)} sites; "
                                           "set it to the number of sites or remove it")
    for key, value in (("comm_round", rounds), ("epochs", epochs)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            errors[f"train_args.{key}"] = "must be a whole number of at least 1"
    for section in FEDML_SECTIONS:
        block = data.get(section)
        for key in (block if isinstance(block, dict) else {}):
            if key in fedml_cross_cloud.REFUSED:
                errors[f"{section}.{key}"] = fedml_cross_cloud.REFUSED[key]
                rest[section] = {k: v for k, v in rest[section].items() if k != key}
    if (data.get("comm_args") or {}).get("backend") not in (None, "MQTT_S3", "sp"):
        errors["comm_args.backend"] = "cross_cloud sites meet through torchft here; use MQTT_S3 (replaced) or remove it"
    rest["comm_args"] = {k: v for k, v in (rest.get("comm_args") or {}).items() if k != "backend"}
    try:
        spec = translate(rest)  # its refusals join ours: every bad key named at once
    except SpecError as exc:
        errors = {**exc.errors, **errors}
        spec = {}
    if not errors:
        errors.update(fedml_cross_cloud.translate(spec, data, rounds, epochs))
    if errors:
        raise SpecError(errors)
    return spec


def _translate_one(section: str, key: str, value: Any, spec: dict[str, Any]) -> str | None:
    if (section, key) in _MAP:
        path = _MAP[section, key]
        if path == "model.name":
            if str(value).lower() not in _MODEL_NAMES:
                return f"model {value!r} has no TrainHub equivalent; use one of {', '.join(sorted(_MODEL_NAMES))}"
            value = _MODEL_NAMES[str(value).lower()]
        if path == "data.dataset":
            if str(value).lower() not in _DATASET_NAMES:
                hint = " (use digits, the bundled 8x8 handwritten digits)" if "mnist" in str(value).lower() else ""
                return (f"dataset {value!r} is not bundled and nothing is downloaded{hint}; "
                        f"use one of {', '.join(_DATASET_NAMES)}")
            value = _DATASET_NAMES[str(value).lower()]
        if path == "train.optimizer":
            value = str(value).lower()
        _set(spec, path, value)
        return None
    if (section, key) == ("device_args", "using_gpu"):
        if value:
            _set(spec, "resources.gpus_per_node", 1)
        return None
    if key in _REFUSED:
        return _REFUSED[key]
    if (section, key) in _NO_EFFECT:
        allowed, why = _NO_EFFECT[section, key]
        if allowed is None or value in allowed:
            return None
        return f"{value!r} is not supported: {why}"
    return "not a FedML setting TrainHub can translate; remove it (see docs/SPEC.md, FedML mapping)"


def _set(spec: dict[str, Any], path: str, value: Any) -> None:
    section, key = path.split(".")
    spec.setdefault(section, {})[key] = value
