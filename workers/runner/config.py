"""The typed job spec: one model used by the web form, the REST API, the CLI and the runner.

Unknown keys, wrong types and impossible combinations raise ``SpecError`` whose
``errors`` map a dotted field path (``train.lr``) to a message that says how to fix it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, model_validator

from workers.runner import crosssite_spec, fedml, modes
from workers.runner.crosssite_spec import Site, Sync
from workers.runner.errors import SpecError
# re-exported: callers import the spec's names from here
from workers.runner.modes import MODES, MODES_TABLE, STRATEGIES, WORKLOADS, Strategy, Workload  # noqa: F401
from workers.runner.sections import (DATASETS, LLM, MODELS, Checkpoint, Data, DeepSpeed, LoRA,  # noqa: F401
                                     Model, Notify, Resources, Script, Train, _Section, http_url_error)

MAX_SPEC_BYTES = 256 * 1024


class JobSpec(_Section):
    # Its validators fill in what the spec leaves open (strategy, mode, default sections);
    # validating each of those assignments would run them all again.
    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    name: str = Field("job", min_length=1, max_length=200)
    mode: Literal[MODES] | None = Field(  # type: ignore[valid-type]
        None, description="older spelling of workload × strategy: " + ", ".join(
            f"{m} = {v.workload}" + (f"×{v.strategy}" if v.strategy else "") for m, v in MODES_TABLE.items()))
    workload: Workload = Field("classify", description="what is trained: " + " | ".join(WORKLOADS))
    strategy: Strategy | None = Field(
        None, description="how it is spread: single | ddp | deepspeed (defaults from resources); "
                          "script jobs use script.launcher instead")
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
    sites: list[Site] | None = Field(None, min_length=1, max_length=16,
                                     description="cross-site: one entry per site {pool, nodes, procs_per_node}")
    sync: Sync | None = Field(None, description="cross-site: how the sites meet (docs/CROSS_SITE.md)")

    @model_validator(mode="before")
    @classmethod
    def _mode_alias(cls, data: Any) -> Any:
        return modes.resolve_alias(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _combinations(self) -> "JobSpec":
        site_errors = crosssite_spec.check(self)
        if self.sites and not site_errors:  # site 0 stands for the job where one pool and one size are asked
            if "pool" not in self.model_fields_set:  # a site's own spec (for_site) names its pool
                self.pool = self.sites[0].pool
            if "resources" not in self.model_fields_set:
                self.resources = self.sites[0].resources
        self._fill_in()
        errors = {**self._strategy_errors(), **site_errors}
        if self.workload == "classify":
            if self.data.dataset not in DATASETS:
                errors["data.dataset"] = f"unknown dataset {self.data.dataset!r}; choose one of {', '.join(DATASETS)}"
            if self.model.name not in MODELS:
                errors["model.name"] = f"unknown model {self.model.name!r}; choose one of {', '.join(MODELS)}"
        for section, fix in _SECTION_FIXES.items():
            if getattr(self, section) is not None and not modes.reads(section, self.workload, self.strategy_name):
                errors[section] = fix
        if self.workload == "script" and self.script is None:
            errors["script"] = "mode script needs a script section with workspace and entry"
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

    def _fill_in(self) -> None:
        """What the spec leaves open: the strategy (from resources), the sections it implies, the mode."""
        if self.strategy is None and self.workload != "script":
            self.strategy = "single" if self.world_size == 1 else "ddp"
        if self.workload == "llm" and self.llm is None:
            self.llm = LLM()
        if self.strategy == "deepspeed" and self.deepspeed is None and self.workload != "script":
            self.deepspeed = DeepSpeed()
        self.mode = modes.mode_of(self.workload, self.strategy)

    def _strategy_errors(self) -> dict[str, str]:
        errors: dict[str, str] = {}
        if self.workload == "script" and self.strategy is not None:
            errors["strategy"] = ("a script starts its own processes; remove strategy and set script.launcher "
                                  "(python, torchrun or deepspeed)")
        if self.strategy != "single":
            return errors
        if self.workload == "classify" and self.world_size > 1:
            errors["resources.procs_per_node"] = ("centralized (strategy single) runs one process; "
                                                  "use mode ddp (or strategy: ddp) for more")
        elif self.world_size > 1:
            errors["strategy"] = "single runs one process; use ddp or deepspeed for several"
        if self.workload == "classify" and self.resources.gpus_per_node > 1:
            errors["resources.gpus_per_node"] = ("centralized (strategy single) uses at most one GPU; "
                                                 "use mode ddp (or strategy: ddp) for more")
        return errors

    def for_site(self, index: int) -> "JobSpec":
        """This spec as cross-site site ``index`` runs it (its pool and resources)."""
        return crosssite_spec.for_site(self, index)

    @property
    def world_size(self) -> int:
        return self.resources.nodes * self.resources.procs_per_node

    @property
    def strategy_name(self) -> str:
        """The strategy that runs this spec: single, ddp or deepspeed (a script counts as single)."""
        return self.strategy or "single"

    def to_dict(self) -> dict[str, Any]:
        """The spec as stored and written to YAML, in the shape every reader understands: ``mode``
        (not ``workload``), and ``strategy`` only where the mode leaves it open (llm)."""
        data = self.model_dump(mode="json", exclude_none=True, exclude={"workload"})
        if MODES_TABLE[self.mode].strategy is not None:
            data.pop("strategy", None)
        return data


#: optional sections only some workloads/strategies read (modes.SCOPES) -> how to fix one set elsewhere
_SECTION_FIXES = {
    "deepspeed": "only for strategy deepspeed (mode deepspeed, or llm with strategy: deepspeed); remove the section",
    "llm": "only for workload llm (mode llm); remove the section or set mode: llm",
    "script": "only for workload script (mode script); remove the section or set mode: script",
}


IMAGE_DATASETS = ("digits",)


def _runner_checks(spec: "JobSpec") -> dict[str, str]:
    """Combinations only the runner knows are impossible (cnn on tables, DeepSpeed overrides, ...)."""
    errors: dict[str, str] = {}
    if (spec.workload == "classify" and spec.model.name == "cnn"
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
