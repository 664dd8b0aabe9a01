"""Checkpoints: ``<run_dir>/checkpoints/step-<N>/``, written atomically, the last k kept.

Each holds the strategy's files (``state.pt``, or the DeepSpeed engine's shards written by
every rank), each rank's RNG state (``rng-rank<R>.pt``) and the resolved config beside
them. A checkpoint is first written to a temporary ``.tmp-step-<N>-a<attempt>`` (``.tmp-step-<N>``
for the bare runner) and renamed when complete, so a crash mid-write never leaves a half checkpoint
that resume would pick. The attempt is in the name because a superseded attempt that wakes late
(``fence``) may still be writing the same step as the run that took its job over; with one shared
name each would delete or fill the other's unfinished directory. Temporary directories that no live
run of this attempt owns (a crash's, an older attempt's) are removed by the next save.

Every file is read with ``torch.load(weights_only=True)`` (``load_file``): tensors and plain
Python values only. A checkpoint can come from another job (``checkpoint.start_from``), and a
pickle that builds arbitrary objects would run that job's code here.
"""
from __future__ import annotations

import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch

from workers.runner import fence
from workers.runner.config import dump_yaml

DIR = "checkpoints"
_NAME = re.compile(r"^step-(\d+)$")
TMP_PREFIX = ".tmp-step-"
_TMP_NAME = re.compile(r"^\.tmp-step-\d+(?:-a(\d+))?$")


def root(run_dir: Path) -> Path:
    return Path(run_dir) / DIR


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint directory, or None."""
    found = [(int(m.group(1)), p) for p in root(run_dir).glob("step-*") if (m := _NAME.match(p.name)) and p.is_dir()]
    return max(found)[1] if found else None


def save(strategy, run_dir: Path, step: int, state: dict[str, Any], spec, keep_last: int) -> Path:
    """Write a checkpoint of ``step``; every rank must call this. Returns the final directory."""
    final = root(run_dir) / f"step-{step}"
    tmp = root(run_dir) / tmp_name(step)
    fence.check(run_dir)
    try:
        if strategy.is_main:
            _remove_stale_tmp(run_dir)
            tmp.mkdir(parents=True)
        strategy.barrier()
        strategy.save_checkpoint(tmp, state)
        torch.save(_rng_state(), tmp / f"rng-rank{strategy.rank}.pt")
        strategy.barrier()
        if strategy.is_main:
            (tmp / "config.resolved.yaml").write_text(dump_yaml(spec), encoding="utf-8")
            fence.check(run_dir)  # the rename is what makes a checkpoint visible: a superseded run never does it
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
            _prune(run_dir, keep_last)
    except Exception as exc:
        # A newer attempt removes an older one's temporary directory: a write that failed because of
        # that is this run being superseded, and must end as one (exit 3), not as a crash.
        superseded = exc if isinstance(exc, fence.Superseded) else _superseded(run_dir)
        if superseded is None:
            raise
        if strategy.is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        if superseded is exc:
            raise
        raise superseded from exc
    strategy.barrier()
    return final


def tmp_name(step: int) -> str:
    """The temporary directory a checkpoint of ``step`` is written to by this process's attempt.

    Every rank of an attempt must agree on it (the main rank creates it, all write into it), so it
    names the attempt, which the executor gives every rank, and not a pid."""
    attempt = fence.attempt()
    return f"{TMP_PREFIX}{step}" if attempt is None else f"{TMP_PREFIX}{step}-a{attempt}"


def _remove_stale_tmp(run_dir: Path) -> None:
    """Remove the temporary directories of this attempt and older ones (or of any, for the bare runner):
    a crash's leftovers, or a superseded run's, which never renames them. A newer attempt's is left
    alone: this run is the superseded one then, and the fence stops it."""
    mine = fence.attempt()
    for path in root(run_dir).glob(f"{TMP_PREFIX}*"):
        m = _TMP_NAME.match(path.name)
        theirs = m and m.group(1)
        if mine is None or not theirs or int(theirs) <= mine:
            shutil.rmtree(path, ignore_errors=True)


def _superseded(run_dir: Path) -> fence.Superseded | None:
    try:
        fence.check(run_dir)
    except fence.Superseded as exc:
        return exc
    return None


class UnsafeCheckpoint(Exception):
    """A checkpoint file holds objects other than tensors and plain values; it was not loaded."""


def load_file(path: Path, map_location=None, allowed: Iterable[type] = ()) -> Any:
    """``torch.load`` of tensors and plain values only (plus the ``allowed`` plain-data classes).

    Raises ``UnsafeCheckpoint`` for anything else, without running any of it."""
    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsafeCheckpoint(
            f"{path} holds objects other than tensors and plain values, which could run code when loaded, "
            "so it was not loaded; resume only from checkpoints TrainHub wrote, or set checkpoint.resume: false "
            f"(the loader said: {str(exc).splitlines()[-1][:200]})") from None


def load(strategy, path: Path) -> dict[str, Any]:
    """Restore model/optimizer/scheduler and this rank's RNG; returns the loop state."""
    try:
        state = strategy.load_checkpoint(path)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise RuntimeError(f"cannot resume from {path}: it does not fit this spec ({exc}); "
                           "use a new run directory or set checkpoint.resume: false") from exc
    rng = path / f"rng-rank{strategy.rank}.pt"
    if rng.exists():
        _set_rng_state(load_file(rng, allowed=_NUMPY_ARRAY))
    return state


def _prune(run_dir: Path, keep_last: int) -> None:
    found = sorted((int(m.group(1)), p) for p in root(run_dir).glob("step-*") if (m := _NAME.match(p.name)))
    for _, path in found[:-keep_last]:
        shutil.rmtree(path, ignore_errors=True)


#: numpy's array reconstruction (no code of its own), for RNG files written before numpy's
#: state was saved as a plain list
_NUMPY_ARRAY = (np.ndarray, np.dtype, np.dtypes.UInt32DType, np._core.multiarray._reconstruct)


def _rng_state() -> dict[str, Any]:
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"python": random.getstate(), "numpy": (name, keys.tolist(), pos, has_gauss, gauss),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
