"""The new-job form. It only gathers values: validation is the runner's spec model.

The fields shown depend on the mode (``MODE_FIELDS``); whatever the spec holds that the
form has no field for travels in the hidden ``extra`` field (JSON), so form → YAML → form
round-trips without losing keys.
"""
from __future__ import annotations

import json
import shlex
from typing import Any

from django import forms

from workers.runner.config import DATASETS, MODELS, MODES, JobSpec, SpecError, load_text

#: form field -> spec path it edits
PATHS = {
    "name": "name", "mode": "mode", "pool": "pool", "priority": "priority",
    "nodes": "resources.nodes", "procs_per_node": "resources.procs_per_node",
    "gpus_per_node": "resources.gpus_per_node",
    "dataset": "data.dataset", "batch_size": "data.batch_size", "data_path": "data.path", "model": "model.name",
    "epochs": "train.epochs", "lr": "train.lr", "optimizer": "train.optimizer", "seed": "train.seed",
    "checkpoint_every": "checkpoint.every_steps", "max_restarts": "max_restarts",
    "timeout_minutes": "timeout_minutes",
    "zero_stage": "deepspeed.zero_stage", "precision": "deepspeed.precision",
    "offload_optimizer": "deepspeed.offload_optimizer",
    "strategy": "strategy", "arch": "llm.arch", "size": "llm.size", "seq_len": "llm.seq_len",
    "tokenizer": "llm.tokenizer", "lora_r": "llm.lora.r",
    "workspace": "script.workspace", "entry": "script.entry", "args": "script.args", "launcher": "script.launcher",
}
FIELD_FOR_PATH = {path: field for field, path in PATHS.items()}

COMMON = ["name", "mode", "pool", "priority", "epochs", "lr", "optimizer", "batch_size", "seed",
          "checkpoint_every", "max_restarts", "timeout_minutes"]
RESOURCES = ["nodes", "procs_per_node", "gpus_per_node"]
MODE_FIELDS = {
    "centralized": ["gpus_per_node", "dataset", "model"],
    "ddp": RESOURCES + ["dataset", "model"],
    "deepspeed": RESOURCES + ["dataset", "model", "zero_stage", "precision", "offload_optimizer"],
    "llm": RESOURCES + ["strategy", "arch", "size", "seq_len", "tokenizer", "data_path", "lora_r"],
    "script": RESOURCES + ["workspace", "entry", "args", "launcher"],
}
MODE_LABELS = {"centralized": "Centralized", "ddp": "DDP", "deepspeed": "DeepSpeed", "llm": "LLM",
               "script": "Script"}
#: the name a new job of each mode starts with; replaced on a mode switch unless the user typed one
DEFAULT_NAMES = {"centralized": "digits-mlp", "ddp": "digits-ddp", "deepspeed": "digits-zero", "llm": "tiny-llm",
                 "script": "my-script"}
#: fields that may be left empty (the spec's default applies)
OPTIONAL = {"priority", "seed", "checkpoint_every", "max_restarts", "timeout_minutes", "nodes", "procs_per_node",
            "gpus_per_node", "seq_len", "tokenizer"}
#: values a mode starts with when picked in the form (the rest are the spec model's defaults)
MODE_DEFAULTS = {
    "centralized": {},
    "ddp": {"procs_per_node": 2},
    "deepspeed": {"procs_per_node": 2},
    "llm": {},
    "script": {"entry": "train.py"},
}


def _choices(values):
    return [(v, v) for v in values]


class JobForm(forms.Form):
    name = forms.CharField(max_length=200, initial="digits-mlp")
    mode = forms.ChoiceField(choices=_choices(MODES), initial="centralized")
    pool = forms.ChoiceField(choices=[])
    priority = forms.IntegerField(initial=0)
    nodes = forms.IntegerField(initial=1)
    procs_per_node = forms.IntegerField(initial=1, label="Processes per node")
    gpus_per_node = forms.IntegerField(initial=0, label="GPUs per node")
    dataset = forms.ChoiceField(choices=_choices(DATASETS), initial="digits")
    model = forms.ChoiceField(choices=_choices(MODELS), initial="mlp")
    epochs = forms.IntegerField(initial=3)
    lr = forms.FloatField(initial=0.001, label="Learning rate")
    optimizer = forms.ChoiceField(choices=[("adamw", "AdamW"), ("adam", "Adam"), ("sgd", "SGD")], initial="adamw")
    batch_size = forms.IntegerField(initial=64)
    seed = forms.IntegerField(initial=0)
    checkpoint_every = forms.IntegerField(initial=0, label="Checkpoint every N steps", help_text="0 = at the end")
    max_restarts = forms.IntegerField(initial=0)
    timeout_minutes = forms.IntegerField(initial=120, label="Timeout (minutes)")
    zero_stage = forms.TypedChoiceField(choices=_choices([0, 1, 2, 3]), coerce=int, initial=2, label="ZeRO stage")
    precision = forms.ChoiceField(choices=_choices(["fp32", "bf16", "fp16"]), initial="fp32")
    offload_optimizer = forms.BooleanField(required=False, label="Offload optimizer to CPU")
    strategy = forms.ChoiceField(choices=[("", "from resources")] + _choices(["single", "ddp", "deepspeed"]),
                                 required=False)
    arch = forms.ChoiceField(choices=_choices(["llama", "gpt2"]), initial="llama", label="Architecture")
    size = forms.ChoiceField(choices=_choices(["tiny", "small", "125m", "350m", "1b"]), initial="tiny")
    seq_len = forms.IntegerField(initial=128, label="Sequence length")
    tokenizer = forms.CharField(initial="byte", help_text="byte, bpe or a local tokenizer directory")
    data_path = forms.CharField(required=False, label="Text data", help_text="local .txt/.jsonl file or folder; "
                                "empty = bundled demo corpus")
    lora_r = forms.IntegerField(initial=0, label="LoRA rank", help_text="0 = full fine-tuning")
    workspace = forms.CharField(help_text="a workspace an administrator registered")
    entry = forms.CharField(initial="train.py", help_text="file or module inside the workspace")
    args = forms.CharField(required=False, help_text='arguments, shell-quoted: --lr 0.1 --name "my run"')
    launcher = forms.ChoiceField(choices=_choices(["python", "torchrun", "deepspeed"]), initial="python")
    extra = forms.CharField(required=False, widget=forms.HiddenInput)
    spec_yaml = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 16, "spellcheck": "false"}),
                                label="Spec (YAML or JSON)",
                                help_text="When filled, this spec is submitted as it is (FedML configs too).")
    spec_file = forms.FileField(required=False, label="…or upload a spec / fedml_config.yaml")

    def __init__(self, *args, pools=(), mode: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pool"].choices = _choices(pools)
        data = self.data if self.is_bound else self.initial
        mode = mode or data.get("mode") or "centralized"
        self.mode = mode if mode in MODES else "centralized"
        self.mode_name = self.mode  # templates see form.mode as the field, not this value
        self.mode_label = MODE_LABELS[self.mode]
        keep = set(COMMON) | set(MODE_FIELDS[self.mode]) | {"extra", "spec_yaml", "spec_file"}
        if self.is_bound and (str(self.data.get("spec_yaml", "")).strip() or self.files.get("spec_file")):
            keep = {"spec_yaml", "spec_file"}  # the text is the whole spec: typed fields are ignored
        for name in list(self.fields):
            if name not in keep:
                del self.fields[name]
            elif name in OPTIONAL:
                self.fields[name].required = False  # left empty: the spec model's default
        if "mode" in self.fields:  # picking a mode swaps in that mode's fields (htmx), defaults filled
            self.fields["mode"].widget.attrs.update({
                "hx-get": "/jobs/new?fragment=mode-fields", "hx-target": "#mode-fields", "hx-swap": "outerHTML",
                "hx-include": "[name=name]"})

    @property
    def common_fields(self):
        return [self[n] for n in COMMON if n in self.fields]

    @property
    def mode_fields(self):
        return [self[n] for n in MODE_FIELDS[self.mode] if n in self.fields]

    def uses_text(self) -> bool:
        return bool(self.cleaned_data.get("spec_yaml", "").strip() or self.cleaned_data.get("spec_file"))

    def spec_data(self) -> dict[str, Any]:
        """The spec mapping to validate: the uploaded file or YAML when given, else the typed fields."""
        upload = self.cleaned_data.get("spec_file")
        if upload:
            if upload.size > 256 * 1024:
                raise SpecError({"spec": "the uploaded file is larger than 256 KiB"})
            return load_text(upload.read().decode("utf-8", "replace"))
        raw = self.cleaned_data.get("spec_yaml", "").strip()
        if raw:
            return load_text(raw)
        return spec_from_fields(self.cleaned_data, self.mode)

    def add_spec_errors(self, errors: dict[str, str]) -> None:
        text = self.uses_text()
        for path, message in errors.items():
            field = None if text else FIELD_FOR_PATH.get(path)
            if field in self.fields:
                self.add_error(field, message)
            else:
                self.add_error("spec_yaml" if text else None, f"{path}: {message}")


def _set(spec: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = spec
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


def spec_from_fields(values: dict[str, Any], mode: str) -> dict[str, Any]:
    """Build a spec from form values (cleaned or raw), on top of the hidden ``extra`` keys."""
    try:
        spec = json.loads(values.get("extra") or "{}")
    except ValueError:
        spec = {}
    spec = spec if isinstance(spec, dict) else {}
    for field in COMMON + MODE_FIELDS[mode]:
        value = values.get(field)
        if field == "strategy" and not value:
            continue
        if field == "data_path" and not value:
            continue
        if field == "lora_r":
            if value:
                _set(spec, "llm.lora.r", value)
            continue
        if field == "args":
            try:
                value = shlex.split(value or "")
            except ValueError as exc:
                raise SpecError({"script.args": f"cannot split the arguments: {exc}; check the quotes"}) from None
        if value is None or value == "":
            continue
        _set(spec, PATHS[field], value)
    if mode == "centralized":
        spec.setdefault("resources", {}).update(nodes=1, procs_per_node=1)
    order = list(JobSpec.model_fields)  # the spec's own key order reads best in YAML
    return dict(sorted(spec.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def _get(spec: dict[str, Any], path: str) -> Any:
    node: Any = spec
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _pop(spec: dict[str, Any], path: str) -> None:
    *parents, leaf = path.split(".")
    chain = [spec]
    for key in parents:
        if not isinstance(chain[-1].get(key), dict):
            return
        chain.append(chain[-1][key])
    chain[-1].pop(leaf, None)
    for node, key in zip(reversed(chain[:-1]), reversed(parents)):  # drop sections left empty
        if node.get(key) == {}:
            node.pop(key)


def initial_from_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Form values for a spec (validated first); keys the form cannot show go to ``extra``."""
    data = JobSpec.model_validate(spec).to_dict()
    mode = data["mode"]
    initial: dict[str, Any] = {}
    for field in COMMON + MODE_FIELDS[mode]:
        value = _get(data, PATHS[field])
        if field == "args" and value is not None:
            value = shlex.join(value)
        if value is not None:
            initial[field] = value
    if mode == "llm":
        initial.setdefault("lora_r", 0)
    extra = json.loads(json.dumps(data))
    for field in COMMON + MODE_FIELDS[mode]:
        if field != "mode":
            _pop(extra, PATHS[field])
    if mode == "centralized":
        _pop(extra, "resources.nodes")
        _pop(extra, "resources.procs_per_node")
    extra = _diff(extra, _defaults(mode))
    extra.pop("mode", None)
    initial["extra"] = json.dumps(extra, sort_keys=True) if extra else ""
    return initial


def _defaults(mode: str) -> dict[str, Any]:
    stub = {"script": {"workspace": "x", "entry": "train.py"}} if mode == "script" else {}
    return JobSpec.model_validate({"mode": mode, **stub}).to_dict()


def _diff(data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``data`` whose values differ from ``defaults`` (recursively)."""
    out = {}
    for key, value in data.items():
        base = defaults.get(key)
        if isinstance(value, dict) and isinstance(base, dict):
            sub = _diff(value, base)
            if sub:
                out[key] = sub
        elif key not in defaults or value != base:
            out[key] = value
    return out


def mode_initial(mode: str) -> dict[str, Any]:
    """Defaults for the fields of ``mode`` when it is picked in the form."""
    base = _defaults(mode)
    initial = {f: _get(base, PATHS[f]) for f in MODE_FIELDS[mode] if _get(base, PATHS[f]) is not None}
    if mode == "script":
        initial["workspace"] = ""
        initial["args"] = ""
    if mode == "llm":
        initial["lora_r"] = 0
        initial.pop("strategy", None)
    return {**initial, **MODE_DEFAULTS[mode]}
