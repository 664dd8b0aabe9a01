"""The new-job form. It only gathers values: validation is the runner's spec model."""
from __future__ import annotations

from typing import Any

from django import forms

from workers.runner.config import DATASETS, MODELS, MODES, JobSpec, load_text

#: spec field path -> form field that shows its error
FIELD_FOR_PATH = {
    "name": "name", "mode": "mode", "pool": "pool", "priority": "priority",
    "data.dataset": "dataset", "data.batch_size": "batch_size", "model.name": "model",
    "train.epochs": "epochs", "train.lr": "lr", "train.optimizer": "optimizer", "train.seed": "seed",
    "resources.procs_per_node": "procs_per_node", "resources.nodes": "nodes",
    "resources.gpus_per_node": "gpus_per_node",
}


class JobForm(forms.Form):
    name = forms.CharField(max_length=200, initial="digits-mlp")
    mode = forms.ChoiceField(choices=[(m, m) for m in MODES], initial="centralized")
    pool = forms.ChoiceField(choices=[])
    dataset = forms.ChoiceField(choices=[(d, d) for d in DATASETS], initial="digits")
    model = forms.ChoiceField(choices=[(m, m) for m in MODELS], initial="mlp")
    epochs = forms.IntegerField(initial=3)
    lr = forms.FloatField(initial=0.001, label="Learning rate")
    optimizer = forms.ChoiceField(choices=[("adamw", "AdamW"), ("adam", "Adam"), ("sgd", "SGD")], initial="adamw")
    batch_size = forms.IntegerField(initial=64)
    seed = forms.IntegerField(initial=0)
    nodes = forms.IntegerField(initial=1)
    procs_per_node = forms.IntegerField(initial=1, label="Processes per node")
    gpus_per_node = forms.IntegerField(initial=0, label="GPUs per node")
    priority = forms.IntegerField(initial=0)
    spec_yaml = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 14, "spellcheck": "false"}),
                                label="Spec (YAML)", help_text="When filled, this spec is submitted as it is.")

    def __init__(self, *args, pools=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pool"].choices = [(p, p) for p in pools]

    def spec_data(self) -> dict[str, Any]:
        """The spec mapping to validate: the YAML when given, else the typed fields."""
        raw = self.cleaned_data.get("spec_yaml", "").strip()
        if raw:
            return load_text(raw)
        c = self.cleaned_data
        return {
            "name": c["name"], "mode": c["mode"], "pool": c["pool"], "priority": c["priority"],
            "resources": {"nodes": c["nodes"], "procs_per_node": c["procs_per_node"],
                          "gpus_per_node": c["gpus_per_node"]},
            "data": {"dataset": c["dataset"], "batch_size": c["batch_size"]},
            "model": {"name": c["model"]},
            "train": {"epochs": c["epochs"], "lr": c["lr"], "optimizer": c["optimizer"], "seed": c["seed"]},
        }

    def add_spec_errors(self, errors: dict[str, str]) -> None:
        uses_yaml = bool(self.cleaned_data.get("spec_yaml", "").strip())
        for path, message in errors.items():
            field = None if uses_yaml else FIELD_FOR_PATH.get(path)
            if field:
                self.add_error(field, message)
            else:
                self.add_error("spec_yaml" if uses_yaml else None, f"{path}: {message}")


def initial_from_spec(spec: dict[str, Any]) -> dict[str, Any]:
    s = JobSpec.model_validate(spec)
    return {"name": s.name, "mode": s.mode, "pool": s.pool, "priority": s.priority, "dataset": s.data.dataset,
            "batch_size": s.data.batch_size, "model": s.model.name, "epochs": s.train.epochs, "lr": s.train.lr,
            "optimizer": s.train.optimizer, "seed": s.train.seed, "nodes": s.resources.nodes,
            "procs_per_node": s.resources.procs_per_node, "gpus_per_node": s.resources.gpus_per_node}
