"""The Strategy interface: how a model is placed, stepped and checkpointed across ranks.

The training loop calls only these methods, so adding a backend is one new file and one
registry entry, never an ``if backend == ...`` in the loop.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from workers.runner.checkpoint import load_file

STATE_FILE = "state.pt"


class Strategy:
    name = "base"
    #: its objects keep the process groups alive in reference cycles: collect them before leaving the group
    collect_before_leaving = False

    def __init__(self, spec, device: torch.device, run_dir: Path):
        self.spec = spec
        self.device = device
        self.run_dir = Path(run_dir)
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.accum = spec.train.grad_accum_steps
        self.model: torch.nn.Module | None = None       # what the loop calls forward on
        self.raw_model: torch.nn.Module | None = None   # the user's module (weights, export)
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler = None

    def data_shard(self) -> tuple[int, int]:
        """(shards, this rank's shard) of the training data."""
        return self.world_size, self.rank

    def take_metrics(self) -> dict[str, float]:
        """Metrics the strategy measured since the last call (cross-site sync: the last sync's)."""
        return {}

    def aligned_step(self, step: int) -> int:
        """The step the run is at after this optimizer step (cross-site sync sets it from the outer step)."""
        return step

    @classmethod
    def init_distributed(cls, args) -> None:
        """Join the process group of the launcher's rendezvous (env: RANK, MASTER_ADDR, ...)."""

    @classmethod
    def destroy_distributed(cls) -> None:
        """Leave the process group (if any) once every strategy object has been torn down."""
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    #: floating inputs are cast to this (the model's dtype under bf16/fp16 DeepSpeed)
    input_dtype: torch.dtype = torch.float32

    def setup(self, model: torch.nn.Module, make_optimizer: Callable, make_scheduler: Callable) -> torch.nn.Module:
        """Place the model, build optimizer and scheduler; returns the module to call."""
        self.raw_model = self.model = model.to(self.device)
        self.optimizer = make_optimizer(model.parameters())
        self.scheduler = make_scheduler(self.optimizer)
        return self.model

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of one micro-batch's (unscaled) loss; accumulation is the strategy's job."""
        # without accumulation no scaling: a division would add a tensor op and an autograd node per step
        (loss if self.accum == 1 else loss / self.accum).backward()

    def step(self) -> float | None:
        """One optimizer step at an accumulation boundary; returns the gradient norm if clipped."""
        norm = None
        if self.spec.train.max_grad_norm:
            norm = float(torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), self.spec.train.max_grad_norm))
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def no_sync(self):
        """Context for micro-batches that do not end an accumulation (skips gradient sync)."""
        return contextlib.nullcontext()

    def full_params(self):
        """Context in which ``raw_model`` holds every parameter in full (for export)."""
        return contextlib.nullcontext()

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def save_checkpoint(self, path: Path, state: dict[str, Any]) -> None:
        """Write model, optimizer, scheduler and ``state`` into directory ``path`` (main rank)."""
        if self.is_main:
            torch.save({"model": self.raw_model.state_dict(), "optimizer": self.optimizer.state_dict(),
                        "scheduler": self.scheduler.state_dict(), "state": state}, path / STATE_FILE)

    def load_checkpoint(self, path: Path) -> dict[str, Any]:
        """Restore from directory ``path`` on every rank; returns the saved ``state``."""
        blob = load_file(path / STATE_FILE, map_location=self.device)
        self.raw_model.load_state_dict(blob["model"])
        self.optimizer.load_state_dict(blob["optimizer"])
        self.scheduler.load_state_dict(blob["scheduler"])
        return blob["state"]

    def barrier(self) -> None:
        if dist.is_available() and dist.is_initialized():
            dist.barrier()

    def all_reduce(self, values: list[float], op: str = "mean") -> list[float]:
        """Combine per-rank numbers (every rank must call this at the same point)."""
        if not (dist.is_available() and dist.is_initialized()) or self.world_size == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self._comm_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        if op == "mean":
            t /= self.world_size
        return t.tolist()

    def _comm_device(self) -> torch.device:
        return self.device if dist.get_backend() == "nccl" else torch.device("cpu")

    def teardown(self) -> None:
        """Free the engine's resources; the process group is left by ``runner.teardown``."""
