"""A job's run directory (``TRAINHUB_RUNS_DIR/job-<id>/``): checkpoints, artifacts, safe downloads.

Every user-given path goes through ``resolve``, which refuses anything that could leave the
run directory: ``..``, absolute paths, backslashes, percent signs (double encoding), NUL,
and symlinks that point outside. Nothing outside the run directory is ever served.
"""
from __future__ import annotations

import re
import tarfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from django.conf import settings

CHECKPOINTS = "checkpoints"
MAX_LISTED = 2000
_STEP = re.compile(r"^step-(\d+)$")
_CHUNK = 1 << 20


class BadPath(ValueError):
    """A requested path that is malformed or tries to leave the run directory (HTTP 400)."""


def run_dir(job_id: int) -> Path:
    return Path(settings.TRAINHUB_RUNS_DIR) / f"job-{job_id}"


def resolve(base: Path, rel: str) -> Path | None:
    """The file or directory ``rel`` inside ``base``; None when it does not exist there.

    Raises ``BadPath`` for a path that is malformed or would leave ``base``.
    """
    if not rel or len(rel) > 1000:
        raise BadPath("give a path relative to the run directory, e.g. checkpoints/step-10")
    if any(ch in rel for ch in ("\x00", "\\", "%", ":")) or any(ord(ch) < 32 for ch in rel):
        raise BadPath("the path holds a character that is not allowed (NUL, backslash, '%', ':' or a control character)")
    if rel.startswith("/") or rel.startswith("~"):
        raise BadPath("the path must be relative to the run directory, not absolute")
    parts = rel.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise BadPath("the path may not contain '..', '.' or empty parts")
    root = base.resolve()
    target = (root / "/".join(parts)).resolve()
    if not target.is_relative_to(root) or target == root:
        return None  # a symlink pointing outside: treat as absent
    return target if target.exists() else None


def _stamp(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)


def _files(base: Path, root: Path) -> Iterator[Path]:
    """Regular files under ``base`` (no symlinks leaving ``root``), sorted, at most MAX_LISTED."""
    count = 0
    for path in sorted(base.rglob("*")):
        if count >= MAX_LISTED:
            return
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            continue
        if path.is_file():
            count += 1
            yield path


def checkpoints(job_id: int) -> list[dict]:
    """Complete checkpoints, newest first: name, step, size, files, modified."""
    base = run_dir(job_id)
    ckpt_root = base / CHECKPOINTS
    if not ckpt_root.is_dir():
        return []
    root = base.resolve()
    found = []
    for path in ckpt_root.iterdir():
        match = _STEP.match(path.name)
        if not match or not path.is_dir():
            continue  # .tmp-step-N is a checkpoint still being written
        files = list(_files(path, root))
        found.append({"name": path.name, "step": int(match.group(1)), "path": f"{CHECKPOINTS}/{path.name}",
                      "size": sum(f.stat().st_size for f in files), "modified": _stamp(path),
                      "files": [str(f.relative_to(path)) for f in files]})
    return sorted(found, key=lambda c: -c["step"])


def artifacts(job_id: int) -> list[dict]:
    """Every file of the run directory outside ``checkpoints/``: path, size, modified."""
    base = run_dir(job_id)
    if not base.is_dir():
        return []
    root = base.resolve()
    out = []
    for path in _files(base, root):
        rel = path.relative_to(base)
        if rel.parts[0] == CHECKPOINTS:
            continue
        out.append({"path": rel.as_posix(), "size": path.stat().st_size, "modified": _stamp(path)})
    return out


def tar_stream(directory: Path, arcroot: str) -> Iterator[bytes]:
    """An uncompressed tar of ``directory``, produced chunk by chunk (checkpoints can be large)."""
    root = directory.resolve()
    for path in _files(directory, root):
        size = path.stat().st_size
        info = tarfile.TarInfo(f"{arcroot}/{path.relative_to(directory).as_posix()}")
        info.size, info.mtime, info.mode = size, int(path.stat().st_mtime), 0o644
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        sent = 0
        with path.open("rb") as fh:
            while sent < size and (chunk := fh.read(min(_CHUNK, size - sent))):
                sent += len(chunk)
                yield chunk
        if sent < size:  # the file shrank while we read it: keep the archive well-formed
            yield b"\0" * (size - sent)
        yield b"\0" * (-size % 512)
    yield b"\0" * 1024
