"""FedML ``training_type: cross_cloud`` → a TrainHub cross-site job with ``sync.algorithm: localsgd``.

FedML's cross-cloud training runs FedAvg: every site trains ``epochs`` local epochs per round,
then a server averages the models, ``comm_round`` times. LocalSGD with ``every`` = one round's
local steps is that average without the server (the sites all-reduce through torchft), so:

    sync: {algorithm: localsgd, every: epochs × steps per epoch of one site's rank}
    train.max_steps: comm_round × every

FedML has no notion of TrainHub pools, so the sites are given beside the FedML sections
(``sites: [{pool: ...}, ...]``). What FedML needed for its own transport (MQTT, S3, client
lists) is refused by name: the sites talk through the job's lighthouse.
"""
from __future__ import annotations

import math
from typing import Any

#: rows of the bundled datasets (the synthetic one: data.samples)
ROWS = {"digits": 1797, "iris": 150, "wine": 178, "breast_cancer": 569}

#: FedML keys of a cross-cloud config that name a server/transport TrainHub replaces
_TRANSPORT = "FedML's server transport; the sites meet through the job's torchft lighthouse — remove it"
REFUSED = {"mqtt_config_path": _TRANSPORT, "s3_config_path": _TRANSPORT,
           "server_optimizer": "cross_cloud runs FedAvg (server lr 1, no momentum); remove it, or write "
                               "sync: {algorithm: diloco, outer_lr, outer_momentum} for an outer optimizer",
           "server_lr": "cross_cloud runs FedAvg (server lr 1); remove it or use sync.algorithm: diloco"}


def steps_per_epoch(spec: dict[str, Any], sites: list[dict]) -> int | None:
    """One site rank's optimizer steps per epoch, as the runner will count them (None: unknown data)."""
    data = spec.get("data", {})
    dataset = data.get("dataset", "digits")
    rows = data.get("samples", 2048) if dataset == "synthetic" else ROWS.get(dataset)
    if rows is None:
        return None
    val_fraction = data.get("val_fraction", 0.2)
    train = rows - (max(1, int(round(rows * val_fraction))) if val_fraction > 0 else 0)
    site = sites[0] if sites and isinstance(sites[0], dict) else {}
    ranks = len(sites) * site.get("nodes", 1) * site.get("procs_per_node", 1)
    share = math.ceil(train / ranks)
    accum = spec.get("train", {}).get("grad_accum_steps", 1)
    return max(1, math.ceil(share / data.get("batch_size", 64)) // accum)


def translate(spec: dict[str, Any], top: dict[str, Any], rounds: int, epochs: int) -> dict[str, str]:
    """Turn the translated ``spec`` (in place) into a localsgd cross-site job; errors by field."""
    sites = top.get("sites")
    if not isinstance(sites, list) or len(sites) < 2:
        return {"common_args.training_type": "cross_cloud needs sites beside the FedML sections, one pool per "
                                             "cloud or lab: sites: [{pool: lab-a}, {pool: cloud-b}]"}
    per_epoch = steps_per_epoch(spec, sites)  # spec already holds the top-level data/train keys
    if per_epoch is None:
        return {"data_args.dataset": "cross_cloud counts a round's local steps from a bundled dataset's size; "
                                     "use a bundled dataset or write sync.every yourself (no FedML sections)"}
    every = epochs * per_epoch
    spec["sync"] = {"algorithm": "localsgd", "every": every}
    spec.setdefault("train", {})
    spec["train"]["max_steps"] = rounds * every
    spec["train"]["epochs"] = rounds * epochs + 1  # max_steps ends the run, at the last round's average
    spec.setdefault("mode", "ddp")
    spec["name"] = top.get("name", "fedml-cross-cloud")
    return {}
