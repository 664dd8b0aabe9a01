"""What a job trains (``workload``) and how it is spread over processes (``strategy``), and
``mode``: the older single word for the pair, still accepted and still written.

One table per fact, here; the spec model, the job form, pool settings and list filters derive
from them. Importing this is free of pydantic, torch, Django and Celery.
"""
from __future__ import annotations

from typing import Literal, NamedTuple, get_args

from workers.runner.errors import SpecError

Workload = Literal["classify", "llm", "script"]
Strategy = Literal["single", "ddp", "deepspeed"]
WORKLOADS: tuple[str, ...] = get_args(Workload)
STRATEGIES: tuple[str, ...] = get_args(Strategy)


class Mode(NamedTuple):
    workload: str
    strategy: str | None  # None: the spec's own strategy field (from resources by default); script: its launcher
    label: str  # shown in the job form and lists
    example_name: str  # the name a new job of this mode starts with in the form


#: mode -> what it means; the first is the default of a spec that names neither mode nor workload
MODES_TABLE: dict[str, Mode] = {
    "centralized": Mode("classify", "single", "Centralized", "digits-mlp"),
    "ddp": Mode("classify", "ddp", "DDP", "digits-ddp"),
    "deepspeed": Mode("classify", "deepspeed", "DeepSpeed", "digits-zero"),
    "llm": Mode("llm", None, "LLM", "tiny-llm"),
    "script": Mode("script", None, "Script", "my-script"),
}
MODES: tuple[str, ...] = tuple(MODES_TABLE)
DEFAULT_MODE = MODES[0]


class Scope(NamedTuple):
    workloads: tuple[str, ...] | None = None  # None: every workload
    strategies: tuple[str, ...] | None = None  # None: every strategy


#: spec paths only some workloads or strategies read (every other path: all of them). The model
#: refuses an optional section where it is not read; the job form shows a field only where it is.
SCOPES: dict[str, Scope] = {
    "model": Scope(workloads=("classify",)),
    "data.dataset": Scope(workloads=("classify",)),
    "data.path": Scope(workloads=("llm",)),
    "llm": Scope(workloads=("llm",)),
    "script": Scope(workloads=("script",)),
    "strategy": Scope(workloads=("classify", "llm")),
    "deepspeed": Scope(strategies=("deepspeed",)),
}


def reads(path: str, workload: str, strategy: str | None) -> bool:
    """Whether a job of ``workload`` under ``strategy`` reads spec ``path``. A strategy not known
    yet (None: llm's comes from resources) reads no strategy's own section."""
    scope = SCOPES.get(path) or SCOPES.get(path.split(".")[0]) or Scope()
    return ((scope.workloads is None or workload in scope.workloads)
            and (scope.strategies is None or strategy in scope.strategies))


def mode_of(workload: str, strategy: str | None) -> str:
    """The mode that writes ``workload`` × ``strategy`` (llm and script carry their strategy apart)."""
    for name, mode in MODES_TABLE.items():
        if mode.workload == workload and mode.strategy in (None, strategy):
            return name
    raise ValueError(f"no mode for workload {workload} under strategy {strategy}")


def resolve_alias(data: dict) -> dict:
    """``data`` with ``mode`` spelled out as ``workload`` (and ``strategy`` where the mode fixes it).

    A ``workload`` or ``strategy`` that contradicts ``mode`` is refused by name. An unknown mode
    is left for the model to refuse with the list of choices.
    """
    mode = data.get("mode")
    if mode is None and "workload" not in data:
        mode = DEFAULT_MODE
    if not isinstance(mode, str) or mode not in MODES_TABLE:
        return data
    meant = MODES_TABLE[mode]
    errors: dict[str, str] = {}
    if data.get("workload") not in (None, meant.workload):
        errors["workload"] = (f"mode {mode} already means workload {meant.workload}; remove mode (the older "
                              f"spelling) or set workload: {meant.workload}")
    if meant.strategy and data.get("strategy") not in (None, meant.strategy):
        errors["strategy"] = (f"mode {mode} already means strategy {meant.strategy}; for {data['strategy']} write "
                              f"workload: {meant.workload} with strategy: {data['strategy']} and no mode")
    if errors:
        raise SpecError(errors)
    out = {**data, "workload": meant.workload}
    if meant.strategy:
        out["strategy"] = meant.strategy
    return out
