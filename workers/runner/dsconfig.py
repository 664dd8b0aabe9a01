"""The DeepSpeed JSON generated from a spec, and the user's ``deepspeed.overrides`` merged in.

Pure Python (no torch, no deepspeed import): ``config.parse_spec`` calls ``conflicts`` so a
bad override is refused in the web form, not 10 minutes into a job.

Overrides are allow-listed (``ALLOWED``): only keys that tune training pass. DeepSpeed's
monitors, profilers and loggers (``csv_monitor``, ``tensorboard``, ``wandb``, ``comet``,
``flops_profiler``, ``comms_logger``, ...), NVMe offload and autotuning take file paths or
server addresses, and a job must not write where the worker can write or reach the network.
"""
from __future__ import annotations

import copy
from typing import Any

#: override keys TrainHub builds itself and refuses to take from ``overrides``
_OWN_SECTIONS = {
    "optimizer": "TrainHub builds the optimizer from train.optimizer/train.lr; remove it",
    "scheduler": "TrainHub builds the schedule from train.scheduler/train.warmup_steps; remove it",
}

_OFFLOAD_PARAM = dict.fromkeys(("device", "pin_memory", "buffer_count", "buffer_size", "max_in_cpu"))
_OFFLOAD_OPTIMIZER = dict.fromkeys(("device", "pin_memory", "buffer_count", "fast_init", "ratio"))
_STAGE3_KNOBS = ("prefetch_bucket_size", "param_persistence_threshold", "model_persistence_threshold",
                 "max_live_parameters", "max_reuse_distance", "gather_16bit_weights_on_model_save",
                 "module_granularity_threshold", "use_all_reduce_for_fetch_params", "allgather_sequential")
_ZERO = {
    **dict.fromkeys(("stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size",
                     "use_multi_rank_bucket_allreduce", "allgather_partitions", "allgather_bucket_size",
                     "overlap_comm", "load_from_fp32_weights", "elastic_checkpoint", "sub_group_size",
                     "ignore_unused_parameters", "round_robin_gradients", "zero_hpz_partition_size",
                     "zero_quantized_weights", "zero_quantized_nontrainable_weights", "zero_quantized_gradients",
                     "memory_efficient_linear", "stage3_gather_fp16_weights_on_model_save")),
    **dict.fromkeys(_STAGE3_KNOBS), **dict.fromkeys("stage3_" + k for k in _STAGE3_KNOBS),
    "offload_param": _OFFLOAD_PARAM, "offload_optimizer": _OFFLOAD_OPTIMIZER,
}
#: the override keys that tune training: a dict is a section, None a key taking one plain value
ALLOWED: dict[str, Any] = {
    **dict.fromkeys(("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size",
                     "gradient_clipping", "prescale_gradients", "gradient_predivide_factor",
                     "communication_data_type", "sparse_gradients", "zero_allow_untested_optimizer",
                     "zero_force_ds_cpu_optimizer")),
    "zero_optimization": _ZERO,
    "bf16": dict.fromkeys(("enabled", "immediate_grad_update", "check_grad_overflow",
                           "bf16_master_weights_and_grads", "bf16_optimizer_states")),
    "fp16": dict.fromkeys(("enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window",
                           "hysteresis", "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads")),
    "data_types": dict.fromkeys(("grad_accum_dtype",)),
    "activation_checkpointing": dict.fromkeys(("partition_activations", "contiguous_memory_optimization",
                                               "cpu_checkpointing", "number_checkpoints",
                                               "synchronize_checkpoint_boundary")),
}
_NOT_ALLOWED = ("not allowed: overrides may only tune training (zero_optimization, bucket sizes, offload, "
                "bf16/fp16, gradient settings); monitors, profilers, loggers and anything naming a file path "
                "or a server are refused — remove it (docs/SPEC.md lists the allowed keys)")


def build(spec, world_size: int | None = None) -> dict[str, Any]:
    """The generated DeepSpeed config for ``spec`` with ``deepspeed.overrides`` merged in."""
    cfg, _ = _generated(spec, world_size)
    return _merge(cfg, spec.deepspeed.overrides)


def conflicts(spec, world_size: int | None = None) -> dict[str, str]:
    """``{"deepspeed.overrides.<key>": fix-it}`` for overrides that are not allowed
    (see ``ALLOWED``) or that contradict the spec."""
    if spec.deepspeed is None:
        return {}
    cfg, owners = _generated(spec, world_size)
    errors = _refused(spec.deepspeed.overrides, ALLOWED)
    for path, value in _leaves(spec.deepspeed.overrides):
        field = "deepspeed.overrides." + ".".join(path)
        if any(field == bad or field.startswith(bad + ".") for bad in list(errors)):
            continue
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


def _refused(tree: dict[str, Any], allowed: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[str, str]:
    """Overrides outside the allow-list, by field; ``optimizer``/``scheduler`` get their own message."""
    errors: dict[str, str] = {}
    for key, value in tree.items():
        path = prefix + (str(key),)
        field = "deepspeed.overrides." + ".".join(path)
        if not prefix and key in _OWN_SECTIONS:
            continue
        if key not in allowed:
            errors[field] = _NOT_ALLOWED
        elif isinstance(allowed[key], dict):
            if isinstance(value, dict):
                errors.update(_refused(value, allowed[key], path))
            else:
                errors[field] = f"must be a mapping of DeepSpeed keys to values, e.g. {key}: {{...}}"
        elif isinstance(value, (dict, list)):
            errors[field] = "must be a single value (a number, true/false or a word)"
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
