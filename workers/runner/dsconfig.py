"""The DeepSpeed JSON generated from a spec, and the user's ``deepspeed.overrides`` merged in.

Pure Python (no torch, no deepspeed import): ``config.parse_spec`` calls ``conflicts`` so a
bad override is refused in the web form, not 10 minutes into a job.
"""
from __future__ import annotations

import copy
from typing import Any

#: override keys TrainHub builds itself and refuses to take from ``overrides``
_OWN_SECTIONS = {
    "optimizer": "TrainHub builds the optimizer from train.optimizer/train.lr; remove it",
    "scheduler": "TrainHub builds the schedule from train.scheduler/train.warmup_steps; remove it",
}


def build(spec, world_size: int | None = None) -> dict[str, Any]:
    """The generated DeepSpeed config for ``spec`` with ``deepspeed.overrides`` merged in."""
    cfg, _ = _generated(spec, world_size)
    return _merge(cfg, spec.deepspeed.overrides)


def conflicts(spec, world_size: int | None = None) -> dict[str, str]:
    """``{"deepspeed.overrides.<key>": fix-it}`` for overrides that contradict the spec."""
    if spec.deepspeed is None:
        return {}
    cfg, owners = _generated(spec, world_size)
    errors: dict[str, str] = {}
    for path, value in _leaves(spec.deepspeed.overrides):
        field = "deepspeed.overrides." + ".".join(path)
        if path[0] in _OWN_SECTIONS:
            errors[field] = _OWN_SECTIONS[path[0]]
            continue
        owner = owners.get(path)
        if owner is None:
            continue
        ours = _get(cfg, path)
        if ours != value:
            errors[field] = (f"conflicts with {owner[0]} (which gives {ours!r}); "
                             f"{owner[1]} or remove the override")
    return errors


def _generated(spec, world_size):
    ds, train, data = spec.deepspeed, spec.train, spec.data
    world = world_size or spec.world_size
    zero: dict[str, Any] = {"stage": ds.zero_stage}
    if ds.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    if ds.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": False}
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": data.batch_size,
        "gradient_accumulation_steps": train.grad_accum_steps,
        "train_batch_size": data.batch_size * train.grad_accum_steps * world,
        "gradient_clipping": float(train.max_grad_norm or 0.0),
        "zero_optimization": zero,
        "bf16": {"enabled": ds.precision == "bf16"},
        "fp16": {"enabled": ds.precision == "fp16"},
        # a torch optimizer (no 70 s DeepSpeed Adam build); allowed with ZeRO and offload
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    set_it = "set it in the spec"
    owners = {
        ("train_micro_batch_size_per_gpu",): ("data.batch_size", "set data.batch_size instead"),
        ("gradient_accumulation_steps",): ("train.grad_accum_steps", "set train.grad_accum_steps instead"),
        ("train_batch_size",): ("data.batch_size × train.grad_accum_steps × ranks",
                                "change data.batch_size or train.grad_accum_steps instead"),
        ("gradient_clipping",): ("train.max_grad_norm", "set train.max_grad_norm instead"),
        ("zero_optimization", "stage"): ("deepspeed.zero_stage", "set deepspeed.zero_stage instead"),
        ("bf16", "enabled"): ("deepspeed.precision", "set deepspeed.precision instead"),
        ("fp16", "enabled"): ("deepspeed.precision", "set deepspeed.precision instead"),
        ("zero_optimization", "offload_optimizer", "device"): ("deepspeed.offload_optimizer", set_it),
        ("zero_optimization", "offload_param", "device"): ("deepspeed.offload_params", set_it),
    }
    return cfg, owners


def _leaves(tree: dict[str, Any], prefix: tuple[str, ...] = ()):
    for key, value in tree.items():
        path = prefix + (str(key),)
        if isinstance(value, dict) and value:
            yield from _leaves(value, path)
        else:
            yield path, value


def _get(tree: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
