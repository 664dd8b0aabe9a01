"""The Workload interface: what is trained (model + data + loss), independent of how
(the Strategy). Any workload runs under any strategy; the training loop in
``workers.runner.train`` only talks to these methods.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from workers.runner.config import JobSpec


class Workload:
    """Base class. Subclasses fill in the abstract methods; the defaults are shared."""

    #: what throughput counts: "samples" or "tokens"
    unit = "samples"

    def __init__(self, spec: JobSpec, run_dir: Path):
        self.spec = spec
        self.run_dir = Path(run_dir)

    def preflight(self) -> None:
        """Raise ``SpecError`` for anything that would fail later (missing paths, ...)."""

    def datasets(self) -> tuple[Dataset, Dataset]:
        """(train, validation) torch datasets."""
        raise NotImplementedError

    def collate(self, batch: list[Any]) -> Any:
        """Batch collation; None means the DataLoader default."""
        return None

    def model(self) -> torch.nn.Module:
        """A freshly initialised model (weights seeded by the runner)."""
        raise NotImplementedError

    def loss(self, model: torch.nn.Module, batch: Any) -> tuple[torch.Tensor, int]:
        """Loss of one batch already on the device, and how many units it covers."""
        raise NotImplementedError

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, batches) -> dict[str, float]:
        """Metrics over the validation batches (already on the device)."""
        raise NotImplementedError

    def train_metrics(self) -> dict[str, float]:
        """Metrics gathered during the training batches since the last call (then reset)."""
        return {}

    def finish(self, model: torch.nn.Module, is_main: bool) -> list[dict[str, str]]:
        """Write final artifacts into ``run_dir``; return ``[{"name", "path"}]`` (main only)."""
        return []
