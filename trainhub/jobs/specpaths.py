"""Paths a spec names on the worker hosts (``data.path``, ``llm.base_model``, ``llm.tokenizer``) lie
only where the job's owner may read: their own jobs' run directories and the data roots an
administrator registered for them (``pools.DataRoot``, per-group like pools).

``spec_places`` is called at submit (``services.spec_validate``, before anything touches the path)
and again on the worker before the job starts (``workers.executor.prepare``), whose sandbox then
binds only the places it returns, read-only. A path is taken both as written (``..`` folded) and
with its symlinks resolved: both must lie in the same place, so neither ``..`` nor a link planted
in a run directory leads out of it.
"""
from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from django.conf import settings

from trainhub.jobs.rundir import run_dir, runs_root
from workers.runner.config import JobSpec, SpecError

BUILT_IN_TOKENIZERS = ("byte", "bpe")
MAX_LISTED = 8  # data roots named in a refusal; more are summarised


def spec_paths(spec: JobSpec) -> dict[str, str]:
    """Every field of ``spec`` that names a path on the worker, and the path as written."""
    found: dict[str, str] = {}
    if spec.data.path:
        found["data.path"] = spec.data.path
    if spec.llm is not None:
        if spec.llm.base_model:
            found["llm.base_model"] = spec.llm.base_model
        if spec.llm.tokenizer not in BUILT_IN_TOKENIZERS:
            found["llm.tokenizer"] = spec.llm.tokenizer
    return found


def spec_places(spec: JobSpec, owner) -> tuple[Path, ...]:
    """The directories (data roots, run directories) that hold ``spec``'s paths, to be shown to the
    job read-only. ``SpecError`` naming each field whose path lies anywhere else."""
    paths = spec_paths(spec)
    if not paths:
        return ()
    roots = _data_roots(owner)
    errors: dict[str, str] = {}
    places: list[Path] = []
    for field, raw in paths.items():
        if not raw.startswith("/"):
            errors[field] = (f"{raw!r} is not an absolute path; give the full path of a file or folder in "
                             f"{_where(roots)}")
            continue
        place = _place(raw, owner, roots)
        if place is None:
            errors[field] = (f"{raw} is outside the places your jobs may read; use a path in {_where(roots)} "
                             "(an administrator registers data roots in the admin)")
        elif place not in places:
            places.append(place)
    if errors:
        raise SpecError(errors)
    return tuple(places)


def _data_roots(owner) -> list[tuple[str, Path]]:
    from trainhub.pools.models import DataRoot

    return [(root.name, Path(os.path.normpath(root.path)))
            for root in DataRoot.objects.for_user(owner) if root.user_allowed]


def _place(raw: str, owner, roots: list[tuple[str, Path]]) -> Path | None:
    """The place that holds ``raw`` both as written and resolved, or None."""
    written = Path(os.path.normpath(raw))
    real = Path(os.path.realpath(raw))
    runs = [Path(os.path.normpath(runs_root())), Path(os.path.realpath(runs_root()))]
    forbidden = runs + [Path(os.path.realpath(settings.VAR_DIR))]
    if any(_within(p, zone) for p in (written, real) for zone in forbidden):
        # the runs root and var/ lie (maybe) inside a data root: only the owner's own run dirs are open there
        return _own_run_dir(written, real, owner, runs)
    for _name, root in roots:
        resolved = Path(os.path.realpath(root))
        if _within(written, root) or _within(written, resolved):
            return root if _within(real, resolved) else None
    return None


def _own_run_dir(written: Path, real: Path, owner, runs: list[Path]) -> Path | None:
    for root in runs:
        if not _within(written, root) or written == root:
            continue
        name = written.relative_to(root).parts[0]
        if not (name.startswith("job-") and name[4:].isdigit()) or not _may_read_job(owner, int(name[4:])):
            return None
        place = run_dir(int(name[4:]))
        return place if _within(real, Path(os.path.realpath(place))) else None
    return None


def _may_read_job(owner, job_id: int) -> bool:
    from trainhub.jobs.models import Job

    if owner is None:
        return False
    jobs = Job.objects.filter(pk=job_id)
    return jobs.exists() if owner.is_staff else jobs.filter(owner=owner).exists()


def _within(path: Path, root: Path) -> bool:
    return PurePosixPath(path).is_relative_to(PurePosixPath(root))


def _where(roots: list[tuple[str, Path]]) -> str:
    own = f"your own jobs' run directories ({runs_root()}/job-<id>/…)"
    if not roots:
        return own + "; no data root is registered for you"
    listed = ", ".join(f"{name} ({path})" for name, path in roots[:MAX_LISTED])
    more = f" and {len(roots) - MAX_LISTED} more" if len(roots) > MAX_LISTED else ""
    return f"{own} or a data root: {listed}{more}"
