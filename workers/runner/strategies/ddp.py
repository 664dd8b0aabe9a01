"""DistributedDataParallel: gloo on CPU, nccl on GPU; gradients sync only at step boundaries."""
from __future__ import annotations

import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from workers.runner.strategies.base import Strategy


def backend_for(args) -> str:
    return "nccl" if args.spec.resources.gpus_per_node > 0 and torch.cuda.is_available() else "gloo"


class DDPStrategy(Strategy):
    name = "ddp"

    @classmethod
    def init_distributed(cls, args) -> None:
        if not dist.is_initialized():
            dist.init_process_group(backend_for(args), timeout=datetime.timedelta(minutes=10))

    def setup(self, model, make_optimizer, make_scheduler):
        self.raw_model = model.to(self.device)
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.model = DistributedDataParallel(self.raw_model, device_ids=ids)
        self.optimizer = make_optimizer(self.model.parameters())
        self.scheduler = make_scheduler(self.optimizer)
        return self.model

    def no_sync(self):
        return self.model.no_sync()
