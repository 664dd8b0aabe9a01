"""DeepSpeed ZeRO 0-3: the engine does backward, accumulation, clipping, stepping and sharded
checkpoints (written by every rank). The generated JSON (``dsconfig.build``) is saved as
``<run_dir>/deepspeed.json``. On CPU: ``DS_ACCELERATOR=cpu`` and the gloo backend.
"""
from __future__ import annotations

import contextlib
import json
import os
import warnings

import torch

from workers.runner import dsconfig
from workers.runner.strategies.base import Strategy

CKPT_TAG = "engine"


def _on_cpu(args) -> bool:
    return args.spec.resources.gpus_per_node == 0 or not torch.cuda.is_available()


class DeepSpeedStrategy(Strategy):
    name = "deepspeed"

    @classmethod
    def init_distributed(cls, args) -> None:
        # DeepSpeed 0.19 calls collectives torch 2.13 renamed; the warning repeats every step
        warnings.filterwarnings("ignore", message=r".*torch\.distributed\.(all_gather_into_tensor|"
                                r"reduce_scatter_tensor)` is deprecated", category=FutureWarning)
        if _on_cpu(args):
            os.environ["DS_ACCELERATOR"] = "cpu"
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo" if _on_cpu(args) else "nccl")

    def setup(self, model, make_optimizer, make_scheduler):
        import deepspeed

        config = dsconfig.build(self.spec, self.world_size)
        if self.is_main:
            (self.run_dir / "deepspeed.json").write_text(json.dumps(config, indent=2) + "\n")
        optimizer = make_optimizer(model.parameters())
        engine, optimizer, _, scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=make_scheduler, config=config)
        self.model, self.raw_model = engine, engine.module
        self.optimizer, self.scheduler = optimizer, scheduler
        precision = self.spec.deepspeed.precision
        self.input_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
        return engine

    def backward(self, loss):
        # the engine scales by 1/accum and only steps at its own accumulation boundary
        self.model.backward(loss)
        self.model.step()

    def step(self):
        norm = self.model.get_global_grad_norm()
        return float(norm) if norm is not None and self.spec.train.max_grad_norm else None

    @property
    def lr(self) -> float:
        return float(self.model.get_lr()[0])

    def full_params(self):
        if self.spec.deepspeed.zero_stage != 3:
            return contextlib.nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(list(self.raw_model.parameters()), modifier_rank=None)

    def save_checkpoint(self, path, state):
        self.model.save_checkpoint(str(path), tag=CKPT_TAG, client_state={"trainhub": state},
                                   save_latest=False)

    def load_checkpoint(self, path):
        _, client = self.model.load_checkpoint(str(path), tag=CKPT_TAG)
        if client is None:
            raise RuntimeError(f"no DeepSpeed engine checkpoint in {path}")
        return client["trainhub"]

    def teardown(self):
        self.model = None
