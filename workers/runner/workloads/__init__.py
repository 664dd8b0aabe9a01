"""Workloads: what is trained. ``get_workload`` picks one from the spec's workload."""
from __future__ import annotations

import importlib
from pathlib import Path

from workers.runner.config import JobSpec

#: workload -> "module:Class"; imported on use so a missing optional dependency only hurts its workload.
#: Any of them runs under any strategy (the spec's ``strategy``).
WORKLOADS = {
    "classify": "workers.runner.workloads.classify:ClassifyWorkload",
    "llm": "workers.runner.workloads.llm:LLMWorkload",
}


def get_workload(spec: JobSpec, run_dir: Path):
    """The workload object for ``spec`` (the script workload has none: the team's script is the workload)."""
    if spec.workload not in WORKLOADS:
        raise ValueError(f"workload {spec.workload} has no built-in implementation")
    module, _, name = WORKLOADS[spec.workload].partition(":")
    return getattr(importlib.import_module(module), name)(spec, Path(run_dir))
