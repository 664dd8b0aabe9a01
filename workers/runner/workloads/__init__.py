"""Workloads: what is trained. ``get_workload`` picks one from the spec's mode."""
from __future__ import annotations

import importlib
from pathlib import Path

from workers.runner.config import JobSpec

#: mode -> "module:Class"; imported on use so a missing optional dependency only hurts its mode
WORKLOADS = {
    "centralized": "workers.runner.workloads.classify:ClassifyWorkload",
    "ddp": "workers.runner.workloads.classify:ClassifyWorkload",
    "deepspeed": "workers.runner.workloads.classify:ClassifyWorkload",
    "llm": "workers.runner.workloads.llm:LLMWorkload",
}


def get_workload(spec: JobSpec, run_dir: Path):
    """The workload object for ``spec`` (script mode has none: the team's script is the workload)."""
    if spec.mode not in WORKLOADS:
        raise ValueError(f"mode {spec.mode} has no built-in workload")
    module, _, name = WORKLOADS[spec.mode].partition(":")
    return getattr(importlib.import_module(module), name)(spec, Path(run_dir))
