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

from workers.runner import checkpoint, dsconfig
from workers.runner.strategies.base import Strategy

CKPT_TAG = "engine"


def _on_cpu(args) -> bool:
    return args.spec.resources.gpus_per_node == 0 or not torch.cuda.is_available()


class DeepSpeedStrategy(Strategy):
    name = "deepspeed"
    collect_before_leaving = True  # ZeRO-3's engine, optimizer and parameters hold the groups in cycles

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
        # DeepSpeed's own loader unpickles anything (weights_only=False); read its files as checkpoint.py does
        engine.checkpoint_engine.load = _load_engine_file
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
        """Destroy the engine and let go of the model, so the process groups they hold can end.

        ZeRO-3 keeps the groups alive from the engine, its optimizer and every partitioned
        parameter, and two process-wide objects keep the model (and, through its forward hooks,
        the engine) alive after ``engine.destroy()``: ``parameter_offload.FWD_MODULE_STACK``,
        onto which it pushes the top module and never pops it, and the class-level
        ``lru_cache`` of ``PartitionedParameterCoordinator.__params_to_release``, keyed by
        submodules. Left there, the gloo groups and their threads live until interpreter exit.
        """
        engine, module = self.model, self.raw_model
        self.model = self.raw_model = self.optimizer = self.scheduler = None
        if engine is not None:
            engine.destroy()
        if module is not None and self.spec.deepspeed.zero_stage == 3:
            _release_zero3_module(module)

    @classmethod
    def destroy_distributed(cls) -> None:
        """Leave through ``deepspeed.comm`` so DeepSpeed drops its own references to the groups
        (``torch.distributed.destroy_process_group`` alone leaves them alive, threads and all)."""
        import deepspeed.comm

        if deepspeed.comm.is_initialized():
            deepspeed.comm.destroy_process_group()
        super().destroy_distributed()


def _release_zero3_module(module) -> None:
    """Drop ZeRO-3's process-wide references to ``module`` (see ``DeepSpeedStrategy.teardown``)."""
    from deepspeed.runtime.zero import parameter_offload
    from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator

    # both are DeepSpeed internals: where a later DeepSpeed lacks one, there is nothing to drop
    stack = getattr(parameter_offload, "FWD_MODULE_STACK", None)
    if isinstance(stack, list):
        stack[:] = [m for m in stack if m is not module]
    # one engine per runner process, so clearing the whole cache frees only this run's entries;
    # the cached function sits inside DeepSpeed's instrument_w_nvtx wrapper (a closure)
    fn = PartitionedParameterCoordinator.__dict__.get("_PartitionedParameterCoordinator__params_to_release")
    cached = [fn] + [cell.cell_contents for cell in getattr(fn, "__closure__", None) or ()]
    for candidate in cached:
        if hasattr(candidate, "cache_clear"):
            candidate.cache_clear()


def _load_engine_file(path: str, map_location=None):
    """The engine's files, tensors and plain values only, plus the two plain-data classes DeepSpeed's
    ZeRO optimizer states pickle (its stage enum and loss scaler)."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum

    return checkpoint.load_file(path, map_location=map_location,
                                allowed=(ZeroStageEnum, LossScaler, DynamicLossScaler))
