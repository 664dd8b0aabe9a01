"""``runner.model.create(args, output_dim)``: a freshly initialised model of the workload."""
from __future__ import annotations

import torch

from workers.runner.arguments import Arguments
from workers.runner.workloads import get_workload


def create(args: Arguments, output_dim: int | None = None) -> torch.nn.Module:
    """The workload's model, weights seeded by ``train.seed`` (identical on every rank)."""
    if args.workload is None:
        args.workload = get_workload(args.spec, args.run_dir)
    torch.manual_seed(args.spec.train.seed)
    model = args.workload.model()
    if output_dim is not None and getattr(args.workload, "output_dim", output_dim) != output_dim:
        raise ValueError(f"model output {args.workload.output_dim} != dataset output_dim {output_dim}")
    return model
