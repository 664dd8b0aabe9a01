"""The typed job spec: one model used by the web form, the REST API, the CLI and the runner.

Unknown keys, wrong types and impossible combinations raise ``SpecError`` whose
``errors`` map a dotted field path (``train.lr``) to a message that says how to fix it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from workers.runner import fedml
from workers.runner.errors import SpecError

MODES = ("centralized", "ddp", "deepspeed", "llm", "script")
DATASETS = ("synthetic", "digits", "iris", "wine", "breast_cancer")
MODELS = ("mlp", "cnn", "logreg")
MAX_SPEC_BYTES = 256 * 1024


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Resources(_Section):
    nodes: int = Field(1, ge=1, le=64, description="machines the job spans")
    procs_per_node: int = Field(1, ge=1, le=64, description="processes (ranks) per machine")
    gpus_per_node: int = Field(0, ge=0, le=16, description="GPUs leased per machine")


class Data(_Section):
    dataset: str = Field("digits", description=f"built-in: {', '.join(DATASETS)}; or a path")
    batch_size: int = Field(64, ge=1, le=65536)
    val_fraction: float = Field(0.2, ge=0.0, lt=1.0)
    num_workers: int = Field(0, ge=0, le=32, description="DataLoader worker processes")
    path: str | None = Field(None, description="local file or directory (llm text data)")
    samples: int = Field(2048, ge=16, le=10_000_000, description="rows of the synthetic set")


class Model(_Section):
    name: str = Field("mlp", description=f"built-in: {', '.join(MODELS)}")
    hidden: int = Field(128, ge=1, le=65536)
    layers: int = Field(2, ge=1, le=64)


class Train(_Section):
    epochs: int = Field(3, ge=1, le=100_000)
    lr: float = Field(1e-3, gt=0.0, le=10.0)
    optimizer: Literal["sgd", "adam", "adamw"] = "adamw"
    weight_decay: float = Field(0.0, ge=0.0, le=1.0)
    seed: int = Field(0, ge=0, le=2**31 - 1)
    grad_accum_steps: int = Field(1, ge=1, le=4096)
    max_grad_norm: float | None = Field(None, gt=0.0)
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimizer steps")
    scheduler: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    eval_every_steps: int = Field(0, ge=0, description="0 = evaluate once per epoch")
    log_every_steps: int = Field(10, ge=1)


class Checkpoint(_Section):
    every_steps: int = Field(0, ge=0, description="0 = only at the end")
    keep_last: int = Field(3, ge=1, le=1000)
    resume: bool = Field(True, description="resume from the latest checkpoint when one exists")
    start_from: str | None = Field(
        None, pattern=r"^job-[0-9]+/checkpoints/step-[0-9]+$",
        description="dashboard only: start from another job's checkpoint, e.g. job-12/checkpoints/step-400")


class DeepSpeed(_Section):
    zero_stage: Literal[0, 1, 2, 3] = 2
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    offload_optimizer: bool = False
    offload_params: bool = False
    overrides: dict[str, Any] = Field(default_factory=dict, description="merged into the generated DeepSpeed JSON")


class LoRA(_Section):
    r: int = Field(8, ge=1, le=1024)
    alpha: int = Field(16, ge=1, le=4096)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] | None = None
    merge: bool = Field(True, description="write a standalone merged model at the end")


class LLM(_Section):
    arch: Literal["llama", "gpt2"] = "llama"
    base_model: str | None = Field(None, description="local checkpoint directory to fine-tune")
    size: Literal["tiny", "small", "125m", "350m", "1b", "custom"] = "tiny"
    d_model: int | None = Field(None, ge=8, le=65536)
    n_layer: int | None = Field(None, ge=1, le=512)
    n_head: int | None = Field(None, ge=1, le=512)
    seq_len: int = Field(128, ge=8, le=131072)
    tokenizer: str = Field("byte", description="byte | bpe | a local tokenizer directory")
    vocab_size: int = Field(512, ge=260, le=262144, description="size of a locally trained BPE")
    lora: LoRA | None = None
    completion_only: bool = Field(False, description="loss on the response only (prompt/response jsonl)")
    gradient_checkpointing: bool = False
    precision: Literal["fp32", "bf16"] = "fp32"
    compile: bool = False
    sample_prompt: str = "The "
    sample_tokens: int = Field(64, ge=0, le=4096)

    @model_validator(mode="after")
    def _shape(self) -> "LLM":
        errors: dict[str, str] = {}
        if self.size == "custom" and not self.base_model and None in (self.d_model, self.n_layer, self.n_head):
            errors["llm.size"] = "custom needs d_model, n_layer and n_head; set all three or pick a preset"
        if self.d_model and self.n_head and self.d_model % self.n_head:
            errors["llm.n_head"] = f"d_model {self.d_model} is not divisible by n_head {self.n_head}; change either"
        if self.base_model and self.tokenizer == "bpe":
            errors["llm.tokenizer"] = ("a BPE trained now would not match base_model's embeddings; use byte "
                                       "(the base model's own tokenizer when it has one) or its tokenizer folder")
        if errors:
            raise SpecError(errors)
        return self


class Script(_Section):
    workspace: str = Field(..., min_length=1, description="name of a workspace an administrator registered")
    entry: str = Field(..., min_length=1, description="file (train.py) or module (pkg.train) inside it")
    args: list[str] = Field(default_factory=list)
    launcher: Literal["python", "torchrun", "deepspeed"] = "python"


class Notify(_Section):
    """Per-job notification overrides; unset fields use the owner's notification settings."""

    webhook: str | None = Field(None, max_length=2000, description="http(s) URL to POST the result to; \"\" = none")
    email: bool | None = Field(None, description="e-mail the owner when the job ends")
    on: list[Literal["succeeded", "failed", "cancelled"]] | None = Field(None, description="final statuses to notify")

    @model_validator(mode="after")
    def _url(self) -> "Notify":
        problem = http_url_error(self.webhook) if self.webhook else None
        if problem:
            raise SpecError({"notify.webhook": problem})
        return self


def http_url_error(url: str) -> str | None:
    """Why ``url`` is not an http(s) URL a webhook can be sent to, or None when it is."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL, e.g. https://hooks.example.com/trainhub"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url.strip()):
        return "must not contain spaces or control characters; percent-encode them (%20)"
    return None


class JobSpec(_Section):
    name: str = Field("job", min_length=1, max_length=200)
    mode: Literal["centralized", "ddp", "deepspeed", "llm", "script"] = "centralized"
    strategy: Literal["single", "ddp", "deepspeed"] | None = Field(
        None, description="llm only: how the model is spread (defaults from resources)")
    pool: str = Field("cpu", min_length=1, max_length=100)
    priority: int = Field(0, ge=-100, le=100)
    resources: Resources = Field(default_factory=Resources)
    data: Data = Field(default_factory=Data)
    model: Model = Field(default_factory=Model)
    train: Train = Field(default_factory=Train)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    deepspeed: DeepSpeed | None = None
    llm: LLM | None = None
    script: Script | None = None
    max_restarts: int = Field(0, ge=0, le=100)
    timeout_minutes: int = Field(120, ge=1, le=60 * 24 * 30)
    watchdog_minutes: float = Field(0, ge=0, le=60 * 24 * 30,
                                    description="fail the job after this long without output or progress; 0: off")
    notify: Notify | None = None

    @model_validator(mode="after")
    def _combinations(self) -> "JobSpec":
        errors: dict[str, str] = {}
        single_proc = self.resources.nodes == 1 and self.resources.procs_per_node == 1
        if self.mode == "centralized" and not single_proc:
            errors["resources.procs_per_node"] = "centralized runs one process; use mode ddp for more"
        if self.mode == "centralized" and self.resources.gpus_per_node > 1:
            errors["resources.gpus_per_node"] = "centralized uses at most one GPU; use mode ddp for more"
        if self.mode in ("centralized", "ddp", "deepspeed"):
            if self.data.dataset not in DATASETS:
                errors["data.dataset"] = f"unknown dataset {self.data.dataset!r}; choose one of {', '.join(DATASETS)}"
            if self.model.name not in MODELS:
                errors["model.name"] = f"unknown model {self.model.name!r}; choose one of {', '.join(MODELS)}"
        if self.deepspeed is not None and self.mode != "deepspeed" and self.strategy != "deepspeed":
            errors["deepspeed"] = "only for mode deepspeed (or llm with strategy deepspeed); remove the section"
        if self.strategy is not None and self.mode != "llm":
            errors["strategy"] = "only for mode llm; the mode itself picks the strategy"
        if self.mode == "llm" and self.llm is None:
            self.llm = LLM()
        if self.llm is not None and self.mode != "llm":
            errors["llm"] = "only for mode llm; remove the section or set mode: llm"
        if self.mode == "script" and self.script is None:
            errors["script"] = "mode script needs a script section with workspace and entry"
        if self.script is not None and self.mode != "script":
            errors["script"] = "only for mode script; remove the section or set mode: script"
        if self.mode == "deepspeed" and self.deepspeed is None:
            self.deepspeed = DeepSpeed()
        if self.mode == "llm" and self.strategy is None:
            self.strategy = "single" if single_proc else "ddp"
        if self.mode == "llm" and self.strategy == "deepspeed" and self.deepspeed is None:
            self.deepspeed = DeepSpeed()
        if self.mode == "llm" and self.strategy == "single" and not single_proc:
            errors["strategy"] = "single runs one process; use ddp or deepspeed for several"
        if self.resources.gpus_per_node and self.resources.procs_per_node > self.resources.gpus_per_node:
            errors["resources.procs_per_node"] = (
                f"{self.resources.procs_per_node} processes cannot share {self.resources.gpus_per_node} GPUs; "
                "set procs_per_node to at most gpus_per_node")
        if self.train.warmup_steps and self.train.max_steps and self.train.warmup_steps > self.train.max_steps:
            errors["train.warmup_steps"] = "longer than train.max_steps; lower it"
        for key, message in _runner_checks(self).items():
            errors.setdefault(key, message)
        if errors:
            raise SpecError(errors)
        return self

    @property
    def world_size(self) -> int:
        return self.resources.nodes * self.resources.procs_per_node

    @property
    def strategy_name(self) -> str:
        """The strategy that runs this spec: single, ddp or deepspeed."""
        if self.mode == "llm":
            return self.strategy or "single"
        return {"centralized": "single", "ddp": "ddp", "deepspeed": "deepspeed"}.get(self.mode, "single")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


IMAGE_DATASETS = ("digits",)


def _runner_checks(spec: "JobSpec") -> dict[str, str]:
    """Combinations only the runner knows are impossible (cnn on tables, DeepSpeed overrides, ...)."""
    errors: dict[str, str] = {}
    if (spec.mode in ("centralized", "ddp", "deepspeed") and spec.model.name == "cnn"
            and spec.data.dataset in DATASETS and spec.data.dataset not in IMAGE_DATASETS):
        errors["model.name"] = (f"cnn needs image-shaped data (digits, 8x8) but {spec.data.dataset} is a table; "
                                "use mlp or logreg, or data.dataset: digits")
    if spec.script is not None:
        entry = spec.script.entry.replace("\\", "/")
        if entry.startswith("/") or ".." in entry.split("/") or ":" in entry:
            errors["script.entry"] = ("must be a relative path or module inside the workspace "
                                      "(no '..', not absolute), e.g. train.py or pkg.train")
        if spec.script.launcher == "python" and spec.world_size > 1:
            errors["script.launcher"] = ("python starts one process; use torchrun (or deepspeed) for "
                                         "several, or set resources to one process")
    ds = spec.deepspeed
    if ds is not None:
        if ds.offload_params and ds.zero_stage != 3:
            errors["deepspeed.offload_params"] = "parameter offload needs deepspeed.zero_stage: 3; raise the stage or set it false"
        if (ds.offload_optimizer or ds.offload_params) and ds.zero_stage == 0:
            errors["deepspeed.offload_optimizer"] = "offload needs ZeRO; set deepspeed.zero_stage to 1, 2 or 3"
        if ds.precision == "fp16" and spec.resources.gpus_per_node == 0:
            errors["deepspeed.precision"] = "fp16 needs a GPU; use bf16 or fp32 on CPU, or set resources.gpus_per_node"
        from workers.runner import dsconfig

        errors.update(dsconfig.conflicts(spec))
    return errors


def _message(err: dict[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "unknown key; remove it or check its spelling"
    if kind == "missing":
        return "required; add this field"
    if kind in ("model_type", "dict_type"):
        return "must be a mapping of keys to values"
    msg = err.get("msg", "invalid value")
    return msg[0].lower() + msg[1:] if msg else "invalid value"


def parse_spec(data: Any) -> JobSpec:
    """Validate a spec mapping (already parsed from JSON/YAML) into a ``JobSpec``.

    Raises ``SpecError`` with one message per offending field.
    """
    if not isinstance(data, dict):
        raise SpecError({"spec": "must be a mapping of keys to values (a YAML or JSON object)"})
    if fedml.is_fedml(data):  # translated here so every entry point accepts FedML configs
        data = fedml.translate(data)
    try:
        return JobSpec.model_validate(data)
    except SpecError:
        raise
    except ValidationError as exc:
        errors: dict[str, str] = {}
        for err in exc.errors():
            ctx_error = (err.get("ctx") or {}).get("error")
            if isinstance(ctx_error, SpecError):
                errors.update(ctx_error.errors)
                continue
            path = ".".join(str(p) for p in err.get("loc", ())) or "spec"
            errors.setdefault(path, _message(err))
        raise SpecError(errors) from None


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses alias-expansion bombs ("billion laughs")."""

    max_aliases = 50

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases = getattr(self, "_aliases", 0) + 1
            if self._aliases > self.max_aliases:
                raise SpecError({"spec": f"more than {self.max_aliases} YAML aliases; write the values out"})
        return super().compose_node(parent, index)


def load_text(text: str) -> dict[str, Any]:
    """Parse YAML or JSON text safely (no custom tags, bounded size, no alias bombs)."""
    if len(text.encode("utf-8", "replace")) > MAX_SPEC_BYTES:
        raise SpecError({"spec": f"larger than {MAX_SPEC_BYTES // 1024} KiB; shorten it"})
    try:
        data = yaml.load(text, Loader=_BoundedLoader) if text.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError({"spec": f"not valid YAML or JSON{where}: {getattr(exc, 'problem', exc)}"}) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError({"spec": "must be a mapping of keys to values (a YAML or JSON object)"})
    json.dumps(data, default=str)  # refuses self-referencing structures
    return data


def load_file(path: str | Path) -> JobSpec:
    """Read and validate a spec file (YAML or JSON)."""
    return parse_spec(load_text(Path(path).read_text(encoding="utf-8")))


def dump_yaml(spec: JobSpec | dict[str, Any]) -> str:
    data = spec.to_dict() if isinstance(spec, JobSpec) else spec
    return yaml.safe_dump(data, sort_keys=False)
