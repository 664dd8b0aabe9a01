"""Checkpoints: ``<run_dir>/checkpoints/step-<N>/``, written atomically, the last k kept.

Each holds the strategy's files (``state.pt``, or the DeepSpeed engine's shards written by
every rank), each rank's RNG state (``rng-rank<R>.pt``) and the resolved config beside
them. A checkpoint is first written to ``.tmp-step-<N>`` and renamed when complete, so a
crash mid-write never leaves a half checkpoint that resume would pick.
"""
from __future__ import annotations

import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workers.runner import fence
from workers.runner.config import dump_yaml

DIR = "checkpoints"
_NAME = re.compile(r"^step-(\d+)$")


def root(run_dir: Path) -> Path:
    return Path(run_dir) / DIR


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint directory, or None."""
    found = [(int(m.group(1)), p) for p in root(run_dir).glob("step-*") if (m := _NAME.match(p.name)) and p.is_dir()]
    return max(found)[1] if found else None


def save(strategy, run_dir: Path, step: int, state: dict[str, Any], spec, keep_last: int) -> Path:
    """Write a checkpoint of ``step``; every rank must call this. Returns the final directory."""
    final = root(run_dir) / f"step-{step}"
    tmp = root(run_dir) / f".tmp-step-{step}"
    fence.check(run_dir)
    if strategy.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    strategy.barrier()
    strategy.save_checkpoint(tmp, state)
    torch.save(_rng_state(), tmp / f"rng-rank{strategy.rank}.pt")
    strategy.barrier()
    if strategy.is_main:
        (tmp / "config.resolved.yaml").write_text(dump_yaml(spec), encoding="utf-8")
        try:
            fence.check(run_dir)  # the rename is what makes a checkpoint visible: a superseded run never does it
        except fence.Superseded:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        _prune(run_dir, keep_last)
    strategy.barrier()
    return final


def load(strategy, path: Path) -> dict[str, Any]:
    """Restore model/optimizer/scheduler and this rank's RNG; returns the loop state."""
    try:
        state = strategy.load_checkpoint(path)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise RuntimeError(f"cannot resume from {path}: it does not fit this spec ({exc}); "
                           "use a new run directory or set checkpoint.resume: false") from exc
    rng = path / f"rng-rank{strategy.rank}.pt"
    if rng.exists():
        _set_rng_state(torch.load(rng, weights_only=False))
    return state


def _prune(run_dir: Path, keep_last: int) -> None:
    found = sorted((int(m.group(1)), p) for p in root(run_dir).glob("step-*") if (m := _NAME.match(p.name)))
    for _, path in found[:-keep_last]:
        shutil.rmtree(path, ignore_errors=True)


def _rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
