"""``runner.device.get_device(args)``: the torch device this rank trains on."""
from __future__ import annotations

import torch

from workers.runner.arguments import Arguments


def get_device(args: Arguments) -> torch.device:
    """``cuda:<LOCAL_RANK>`` when the spec leases GPUs, else ``cpu``.

    Raises ``RuntimeError`` when GPUs were requested but CUDA is not usable here.
    """
    if args.spec.resources.gpus_per_node == 0:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("resources.gpus_per_node asks for GPUs but CUDA is not available on this "
                           "machine; run on a GPU pool or set gpus_per_node: 0")
    device = torch.device("cuda", args.local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device
