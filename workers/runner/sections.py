"""The sections of a job spec (resources, data, model, train, ...): typed, bounded, and
refusing unknown keys. ``config.JobSpec`` puts them together and checks combinations."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workers.runner.errors import SpecError

DATASETS = ("synthetic", "digits", "iris", "wine", "breast_cancer")
MODELS = ("mlp", "cnn", "logreg")


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
    optimizer: Literal["adamw", "adam", "sgd"] = "adamw"
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
    entry: str = Field(..., min_length=1, examples=["train.py"],
                       description="file (train.py) or module (pkg.train) inside it")
    args: list[str] = Field(default_factory=list)
    launcher: Literal["python", "torchrun", "deepspeed"] = "python"


class Notify(_Section):
    """Per-job notification overrides; unset fields use the owner's notification settings."""

    webhook: str | None = Field(None, max_length=2000, description="http(s) URL to POST the result to; \"\" = none")
    email: bool | None = Field(None, description="e-mail the owner when the job ends")
    on: list[Literal["succeeded", "failed", "cancelled"]] | None = Field(None, description="final statuses to notify")

    @model_validator(mode="before")
    @classmethod
    def _yaml_on(cls, data):
        """YAML 1.1 (PyYAML) reads the key ``on`` as the boolean true: take it as ``on``, the documented key.
        A client that read the YAML and sends JSON (the CLI, a script) turns that key into ``"true"``."""
        if isinstance(data, dict) and any(k is True or k == "true" for k in data):
            if "on" in data or (True in data and "true" in data):
                raise SpecError({"notify.on": "given twice (once as 'on', once as a YAML true key); keep one"})
            data = {("on" if k is True or k == "true" else k): v for k, v in data.items()}
        if isinstance(data, dict) and any(isinstance(k, bool) for k in data):
            raise SpecError({"notify": "a key reads as a YAML boolean (off/no/false); "
                                       "the keys are webhook, email and on"})
        return data

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
