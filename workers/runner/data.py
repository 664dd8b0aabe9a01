"""``runner.data.load(args)``: the train/validation datasets of the job's workload."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from torch.utils.data import Dataset

from workers.runner.arguments import Arguments
from workers.runner.workloads import get_workload


@dataclass
class Datasets:
    train: Dataset
    val: Dataset
    #: classes for classification, vocabulary size for language models, None if not meaningful
    output_dim: int | None
    collate: Callable[[list[Any]], Any] | None


def load(args: Arguments) -> Datasets:
    """Build (or generate) the datasets; no downloads. Caches the workload on ``args``."""
    if args.workload is None:
        args.workload = get_workload(args.spec, args.run_dir)
    args.workload.preflight()
    train, val = args.workload.datasets()
    return Datasets(train=train, val=val, output_dim=getattr(args.workload, "output_dim", None),
                    collate=_collate_of(args.workload))


def _collate_of(workload) -> Callable | None:
    # the base class returns None for "DataLoader default"; a subclass overriding it is a collate fn
    from workers.runner.workloads.base import Workload

    return workload.collate if type(workload).collate is not Workload.collate else None
