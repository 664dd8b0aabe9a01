"""``preflight(spec, gpus_available)``: refuse a job that cannot start on this worker pool.

Called on submit (by the web app, which never imports torch) and by the runner; cheap and
free of torch imports. Raises ``SpecError`` with one fix-it message per field.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from workers.runner.config import JobSpec, SpecError

_BUILT_IN_TOKENIZERS = ("byte", "bpe")


def preflight(spec: JobSpec, gpus_available: int | None, *, workspace_dir: str | Path | None = None) -> None:
    """Check resources against ``gpus_available`` (GPUs per machine of the pool; None = unknown),
    optional packages the job needs, and that every local path it names exists."""
    errors: dict[str, str] = {}
    wanted = spec.resources.gpus_per_node
    if gpus_available is not None and wanted > gpus_available:
        errors["resources.gpus_per_node"] = (f"asks for {wanted} GPU(s) per machine but this pool's machines have "
                                             f"{gpus_available}; lower it or choose a pool with GPUs")
    uses_deepspeed = spec.deepspeed is not None or (spec.script is not None and spec.script.launcher == "deepspeed")
    if uses_deepspeed and not _installed("deepspeed"):
        field = "script.launcher" if spec.script is not None else ("deepspeed" if spec.mode != "deepspeed" else "mode")
        errors[field] = "DeepSpeed is not installed on this worker; install deepspeed or use ddp"
    if spec.llm is not None:
        if spec.llm.lora is not None and not _installed("peft"):
            errors["llm.lora"] = "LoRA needs the peft package, which is not installed on this worker; install peft"
        if spec.llm.base_model and not Path(spec.llm.base_model).expanduser().exists():
            errors["llm.base_model"] = f"{spec.llm.base_model} does not exist on this worker; give a local checkpoint directory"
        tok = spec.llm.tokenizer
        if tok not in _BUILT_IN_TOKENIZERS and not Path(tok).expanduser().exists():
            errors["llm.tokenizer"] = f"{tok} is neither byte, bpe nor an existing local tokenizer directory"
    if spec.data.path and not Path(spec.data.path).expanduser().exists():
        errors["data.path"] = f"{spec.data.path} does not exist on this worker; check the path"
    if spec.script is not None and workspace_dir is not None:
        from workers.runner.launch import resolve_entry

        try:
            resolve_entry(workspace_dir, spec.script.entry)
        except SpecError as exc:
            errors.update(exc.errors)
    if errors:
        raise SpecError(errors)


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None
