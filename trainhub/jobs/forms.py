"""The new-job form. It only gathers values: validation is the runner's spec model.

Its choices and start values come from that model (``JobSpec``), and which fields a mode
shows from the spec paths the mode's workload and strategy read (``workers.runner.modes``).
Whatever the spec holds that the form has no field for travels in the hidden ``extra``
field (JSON), so form → YAML → form round-trips without losing keys.
"""
from __future__ import annotations

import json
import shlex
from typing import Any, Literal, get_args, get_origin

from django import forms
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from workers.runner.config import DATASETS, MODELS, JobSpec, SpecError, load_text
from workers.runner.modes import DEFAULT_MODE, MODES, MODES_TABLE, STRATEGIES, reads

#: form field -> spec path it edits; this order is the order the fields are shown in
PATHS = {
    "name": "name", "mode": "mode", "pool": "pool", "priority": "priority",
    "nodes": "resources.nodes", "procs_per_node": "resources.procs_per_node",
    "gpus_per_node": "resources.gpus_per_node",
    "dataset": "data.dataset", "batch_size": "data.batch_size", "model": "model.name",
    "epochs": "train.epochs", "lr": "train.lr", "optimizer": "train.optimizer", "seed": "train.seed",
    "checkpoint_every": "checkpoint.every_steps", "max_restarts": "max_restarts",
    "timeout_minutes": "timeout_minutes",
    "zero_stage": "deepspeed.zero_stage", "precision": "deepspeed.precision",
    "offload_optimizer": "deepspeed.offload_optimizer",
    "strategy": "strategy", "arch": "llm.arch", "size": "llm.size", "seq_len": "llm.seq_len",
    "tokenizer": "llm.tokenizer", "data_path": "data.path", "lora_r": "llm.lora.r",
    "workspace": "script.workspace", "entry": "script.entry", "args": "script.args", "launcher": "script.launcher",
}
FIELD_FOR_PATH = {path: field for field, path in PATHS.items()}

#: shown for every mode, above the mode's own settings
COMMON = ["name", "mode", "pool", "priority", "epochs", "lr", "optimizer", "batch_size", "seed",
          "checkpoint_every", "max_restarts", "timeout_minutes"]
#: fields a one-process strategy fixes at 1 (the spec model refuses more), so the form hides them
ONE_PROCESS = ("nodes", "procs_per_node")
#: fields that may be left empty (the spec's default applies)
OPTIONAL = {"priority", "seed", "checkpoint_every", "max_restarts", "timeout_minutes", "nodes", "procs_per_node",
            "gpus_per_node", "seq_len", "tokenizer"}
MODE_LABELS = {mode: row.label for mode, row in MODES_TABLE.items()}
#: the name a new job of each mode starts with; replaced on a mode switch unless the user typed one
DEFAULT_NAMES = {mode: row.example_name for mode, row in MODES_TABLE.items()}
SPEC_FILE_LIMIT = 256 * 1024  # bytes of an uploaded spec
_OPTIMIZER_LABELS = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD"}


def mode_fields(mode: str) -> list[str]:
    """The fields of ``mode``'s own settings: those whose spec path its workload and strategy read."""
    row = MODES_TABLE[mode]
    shown = []
    for field, path in PATHS.items():
        if field in COMMON or not reads(path, row.workload, row.strategy):
            continue
        if field == "strategy" and row.strategy is not None:
            continue  # the mode itself fixes it
        if field in ONE_PROCESS and row.strategy == "single":
            continue
        shown.append(field)
    return shown


def _spec_field(path: str):
    """The model's ``FieldInfo`` for a dotted spec path (``llm.size``)."""
    model: Any = JobSpec
    info = None
    for key in path.split("."):
        info = model.model_fields[key]
        model = next((t for t in (info.annotation, *get_args(info.annotation))
                      if isinstance(t, type) and issubclass(t, BaseModel)), None)
    return info


def _values(path: str) -> tuple:
    """The values the model allows at ``path`` (a ``Literal``, possibly optional)."""
    annotation = _spec_field(path).annotation
    for candidate in (annotation, *get_args(annotation)):
        if get_origin(candidate) is Literal:
            return get_args(candidate)
    raise TypeError(f"{path} is not a choice in the spec model")


def _default(path: str) -> Any:
    """The model's default at ``path``, else its first example (a required field's start value)."""
    info = _spec_field(path)
    if info.default is not PydanticUndefined and info.default is not None:
        return info.default
    return (info.examples or [None])[0]


def _choices(values):
    return [(v, v) for v in values]


class JobForm(forms.Form):
    name = forms.CharField(max_length=200, initial=DEFAULT_NAMES[DEFAULT_MODE])
    mode = forms.ChoiceField(choices=_choices(MODES), initial=DEFAULT_MODE)
    pool = forms.ChoiceField(choices=[])
    priority = forms.IntegerField(initial=_default("priority"))
    nodes = forms.IntegerField(initial=_default("resources.nodes"))
    procs_per_node = forms.IntegerField(initial=_default("resources.procs_per_node"), label="Processes per node")
    gpus_per_node = forms.IntegerField(initial=_default("resources.gpus_per_node"), label="GPUs per node")
    dataset = forms.ChoiceField(choices=_choices(DATASETS), initial=_default("data.dataset"))
    model = forms.ChoiceField(choices=_choices(MODELS), initial=_default("model.name"))
    epochs = forms.IntegerField(initial=_default("train.epochs"))
    lr = forms.FloatField(initial=_default("train.lr"), label="Learning rate")
    optimizer = forms.ChoiceField(choices=[(v, _OPTIMIZER_LABELS.get(v, v)) for v in _values("train.optimizer")],
                                  initial=_default("train.optimizer"))
    batch_size = forms.IntegerField(initial=_default("data.batch_size"))
    seed = forms.IntegerField(initial=_default("train.seed"))
    checkpoint_every = forms.IntegerField(initial=_default("checkpoint.every_steps"),
                                          label="Checkpoint every N steps", help_text="0 = at the end")
    max_restarts = forms.IntegerField(initial=_default("max_restarts"))
    timeout_minutes = forms.IntegerField(initial=_default("timeout_minutes"), label="Timeout (minutes)")
    zero_stage = forms.TypedChoiceField(choices=_choices(_values("deepspeed.zero_stage")), coerce=int,
                                        initial=_default("deepspeed.zero_stage"), label="ZeRO stage")
    precision = forms.ChoiceField(choices=_choices(_values("deepspeed.precision")),
                                  initial=_default("deepspeed.precision"))
    offload_optimizer = forms.BooleanField(required=False, label="Offload optimizer to CPU")
    strategy = forms.ChoiceField(choices=[("", "from resources")] + _choices(STRATEGIES), required=False)
    arch = forms.ChoiceField(choices=_choices(_values("llm.arch")), initial=_default("llm.arch"),
                             label="Architecture")
    size = forms.ChoiceField(choices=_choices(_values("llm.size")), initial=_default("llm.size"),
                             help_text="custom: set d_model, n_layer and n_head in the YAML tab")
    seq_len = forms.IntegerField(initial=_default("llm.seq_len"), label="Sequence length")
    tokenizer = forms.CharField(initial=_default("llm.tokenizer"), help_text="byte, bpe or a local tokenizer directory")
    data_path = forms.CharField(required=False, label="Text data", help_text="local .txt/.jsonl file or folder; "
                                "empty = bundled demo corpus")
    lora_r = forms.IntegerField(initial=0, label="LoRA rank", help_text="0 = full fine-tuning")
    workspace = forms.CharField(help_text="a workspace an administrator registered")
    entry = forms.CharField(initial=_default("script.entry"), help_text="file or module inside the workspace")
    args = forms.CharField(required=False, help_text='arguments, shell-quoted: --lr 0.1 --name "my run"')
    launcher = forms.ChoiceField(choices=_choices(_values("script.launcher")), initial=_default("script.launcher"))
    extra = forms.CharField(required=False, widget=forms.HiddenInput)
    spec_yaml = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 16, "spellcheck": "false"}),
                                label="Spec (YAML or JSON)",
                                help_text="When filled, this spec is submitted as it is (FedML configs too).")
    spec_file = forms.FileField(required=False, label="…or upload a spec / fedml_config.yaml")

    def __init__(self, *args, pools=(), mode: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pool"].choices = _choices(pools)
        data = self.data if self.is_bound else self.initial
        mode = mode or data.get("mode") or DEFAULT_MODE
        self.mode = mode if mode in MODES else DEFAULT_MODE
        self.mode_name = self.mode  # templates see form.mode as the field, not this value
        self.mode_label = MODE_LABELS[self.mode]
        keep = set(COMMON) | set(mode_fields(self.mode)) | {"extra", "spec_yaml", "spec_file"}
        if self.is_bound and (str(self.data.get("spec_yaml", "")).strip() or self.files.get("spec_file")):
            keep = {"spec_yaml", "spec_file"}  # the text is the whole spec: typed fields are ignored
        for name in list(self.fields):
            if name not in keep:
                del self.fields[name]
                continue
            if name in OPTIONAL:
                self.fields[name].required = False  # left empty: the spec model's default
            _typed_as_text(self.fields[name])
        if "workspace" in self.fields:
            self.fields["workspace"] = _workspace_field(self.fields["workspace"].initial)
        if "mode" in self.fields:  # picking a mode swaps in that mode's fields (htmx), defaults filled
            self.fields["mode"].widget.attrs.update({
                "hx-get": "/jobs/new?fragment=mode-fields", "hx-target": "#mode-fields", "hx-swap": "outerHTML",
                "hx-include": "[name=name]"})

    @property
    def common_fields(self):
        return [self[n] for n in COMMON if n in self.fields]

    @property
    def mode_fields(self):
        return [self[n] for n in mode_fields(self.mode) if n in self.fields]

    def uses_text(self) -> bool:
        return bool(self.cleaned_data.get("spec_yaml", "").strip() or self.cleaned_data.get("spec_file"))

    def spec_data(self) -> dict[str, Any]:
        """The spec mapping to validate: the uploaded file or YAML when given, else the typed fields."""
        upload = self.cleaned_data.get("spec_file")
        if upload:
            if upload.size > SPEC_FILE_LIMIT:
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


def _workspace_field(initial) -> forms.Field:
    """The registered workspaces to pick from (free text only while none is registered)."""
    from trainhub.pools.models import Workspace

    names = list(Workspace.objects.order_by("name").values_list("name", flat=True))
    if not names:
        return forms.CharField(initial=initial, help_text="no workspace is registered yet: an administrator adds "
                                                          "one (Admin → Workspaces) with the directory of your code")
    return forms.ChoiceField(choices=[("", "— pick a workspace —")] + [(n, n) for n in names], initial=initial,
                             help_text="a directory of your team's code an administrator registered")


def _typed_as_text(field: forms.Field) -> None:
    """Number fields as text inputs with a numeric keyboard: a browser sends nothing for letters typed
    into ``type=number``, which would read "This field is required."; this way the server sees the
    text and says it is not a number."""
    if isinstance(field, (forms.IntegerField, forms.FloatField)):
        whole = not isinstance(field, forms.FloatField)
        field.widget = forms.TextInput(attrs={"inputmode": "numeric" if whole else "decimal"})
        field.error_messages["invalid"] = ("must be a whole number, e.g. 3" if whole
                                           else "must be a number, e.g. 0.001 or 1e-3")


def _set(spec: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = spec
    for depth, key in enumerate(parents, 1):
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            section = ".".join(parents[:depth])
            raise SpecError({section: f"must be a section of keys, not {type(node).__name__} {str(node)[:40]!r}; "
                                      "fix it in the YAML tab"})
    node[leaf] = value


def spec_from_fields(values: dict[str, Any], mode: str) -> dict[str, Any]:
    """Build a spec from form values (cleaned or raw), on top of the hidden ``extra`` keys."""
    try:  # a hidden field, but the client's to forge: nested past the parser, a list, a value for a section
        spec = json.loads(values.get("extra") or "{}")
    except (ValueError, RecursionError):
        spec = None
    if not isinstance(spec, dict):
        raise SpecError({"extra": "the form's hidden field of other spec keys is not a JSON mapping; "
                                  "reload the page, or paste the whole spec in the YAML tab"})
    for field in COMMON + mode_fields(mode):
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
    if MODES_TABLE[mode].strategy == "single":
        for f in ONE_PROCESS:
            _set(spec, PATHS[f], 1)
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
    for field in COMMON + mode_fields(mode):
        value = _get(data, PATHS[field])
        if field == "args" and value is not None:
            value = shlex.join(value)
        if value is not None:
            initial[field] = value
    if "lora_r" in mode_fields(mode):
        initial.setdefault("lora_r", 0)
    extra = json.loads(json.dumps(data))
    for field in COMMON + mode_fields(mode):
        if field != "mode":
            _pop(extra, PATHS[field])
    if MODES_TABLE[mode].strategy == "single":
        for field in ONE_PROCESS:
            _pop(extra, PATHS[field])
    extra = _diff(extra, _defaults(mode))
    extra.pop("mode", None)
    initial["extra"] = json.dumps(extra, sort_keys=True) if extra else ""
    return initial


def _defaults(mode: str) -> dict[str, Any]:
    stub = {"script": {"workspace": "x", "entry": _default("script.entry")}} if mode == "script" else {}
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
    fields = mode_fields(mode)
    initial = {f: _get(base, PATHS[f]) for f in fields if _get(base, PATHS[f]) is not None}
    for field in {"workspace", "args"} & set(fields):
        initial[field] = ""
    if "lora_r" in fields:
        initial["lora_r"] = 0
    initial.pop("strategy", None)  # empty: from resources
    if MODES_TABLE[mode].strategy not in (None, "single"):
        initial["procs_per_node"] = 2  # a spread strategy starts spread over two processes
    return initial
