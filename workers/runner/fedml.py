"""Translate a FedML ``fedml_config.yaml`` into a TrainHub spec (placeholder, extended by the runner work)."""
from __future__ import annotations

from typing import Any

FEDML_SECTIONS = ("common_args", "data_args", "model_args", "train_args", "device_args",
                  "comm_args", "tracking_args", "environment_args", "validation_args")


def is_fedml(data: dict[str, Any]) -> bool:
    return any(key in data for key in FEDML_SECTIONS)


def translate(data: dict[str, Any]) -> dict[str, Any]:
    from workers.runner.config import SpecError

    raise SpecError({"common_args": "FedML configs are not translated yet"})
