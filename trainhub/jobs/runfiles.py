"""A job's files for the web: checkpoints, artifacts, safe downloads — never a symlink followed.

A job's code can write anything into its run directory, including replacing the directory
itself with a symlink (``ln -s / $TRAINHUB_RUN_DIR``) or planting ``leak -> /etc`` in it. So
nothing here resolves a path: the configured runs root is opened once (an administrator's
path, the one name resolved), and from that descriptor every component below it is opened
with ``O_NOFOLLOW`` — a symlink anywhere on the path is refused, a swap between two steps
cannot redirect us. Listings and tar archives walk by descriptor too and skip symlinks.
Malformed user paths (``..``, absolute, backslashes, ``%``, NUL) are refused up front.
"""
from __future__ import annotations

import itertools
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

from trainhub.jobs.rundir import CHECKPOINTS, run_dir_name, runs_root
from workers.runner.fence import FENCE_FILE

MAX_LISTED = 2000
#: directory entries looked at (files, folders, links, anything) per listing, and the deepest folder
#: entered: a job that makes a million empty folders, or one folder nested ten thousand deep, costs
#: the web server no more than this (the files beyond are not listed)
MAX_EXAMINED = 20_000
MAX_DEPTH = 32
_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO the job planted must not hang the web server in open(); regular files ignore it
_LEAF_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class BadPath(ValueError):
    """A requested path that is malformed or tries to leave the run directory (HTTP 400)."""


@dataclass
class Opened:
    """An open file or directory inside a run directory; the caller owns ``fd``."""
    fd: int
    is_dir: bool
    name: str


def check_path(rel: str) -> list[str]:
    """The components of a user-given relative path. Raises ``BadPath`` for a malformed one."""
    if not rel or len(rel) > 1000:
        raise BadPath("give a path relative to the run directory, e.g. checkpoints/step-10")
    if any(ch in rel for ch in ("\x00", "\\", "%", ":")) or any(ord(ch) < 32 for ch in rel):
        raise BadPath("the path holds a character that is not allowed (NUL, backslash, '%', ':' or a control character)")
    if rel.startswith("/") or rel.startswith("~"):
        raise BadPath("the path must be relative to the run directory, not absolute")
    parts = rel.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise BadPath("the path may not contain '..', '.' or empty parts")
    return parts


def _open_dir_at(dir_fd: int, name: str) -> int | None:
    """The directory ``name`` under ``dir_fd``; None when missing, not a directory, or a symlink."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:  # ELOOP for a symlink, ENOTDIR, ENOENT: all mean "not here"
        return None


def _open_job_dir(job_id: int) -> int | None:
    try:
        root = os.open(os.path.realpath(runs_root()), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _open_dir_at(root, run_dir_name(job_id))
    finally:
        os.close(root)


def _open_dirs(job_id: int, parts: list[str]) -> int | None:
    """The job's run directory, then each of ``parts`` below it, each opened without following links."""
    fd = _open_job_dir(job_id)
    for part in parts:
        if fd is None:
            return None
        child = _open_dir_at(fd, part)
        os.close(fd)
        fd = child
    return fd


def open_path(job_id: int, rel: str) -> Opened | None:
    """The regular file or directory ``rel`` in the job's run directory, opened; None when absent.

    Raises ``BadPath`` for a malformed path. A symlink anywhere on the way, or a leaf that is
    neither a regular file nor a directory (a FIFO, a device), counts as absent.
    """
    parts = check_path(rel)
    parent = _open_dirs(job_id, parts[:-1])
    if parent is None:
        return None
    try:
        fd = os.open(parts[-1], _LEAF_FLAGS, dir_fd=parent)
    except OSError:
        return None
    finally:
        os.close(parent)
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
        return Opened(fd, stat.S_ISDIR(mode), parts[-1])
    os.close(fd)
    return None


def _budget() -> list[int]:
    """[files still to list, entries still to look at] for one walk."""
    return [MAX_LISTED, MAX_EXAMINED]


def _walk(dir_fd: int, prefix: str, budget: list[int],
          skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, int, str, os.stat_result]]:
    """(relative path, parent fd, name, stat) of the regular files under ``dir_fd``, in sorted order.

    Symlinks are skipped, never followed. Stops as soon as ``budget[0]`` files were given or
    ``budget[1]`` entries were looked at, and enters no folder deeper than ``MAX_DEPTH``, so a huge
    tree is never walked in full; only one directory's names are held at a time. ``skip``: names not
    entered at this level.
    """
    with os.scandir(dir_fd) as entries:
        names = sorted(itertools.islice(entries, max(0, budget[1])), key=lambda e: e.name)
    budget[1] -= len(names)
    for entry in names:
        if budget[0] <= 0:
            return
        if entry.is_symlink() or entry.name in skip:
            continue
        if entry.is_dir(follow_symlinks=False):
            if prefix.count("/") >= MAX_DEPTH or budget[1] <= 0:
                continue
            child = _open_dir_at(dir_fd, entry.name)
            if child is None:
                continue
            try:
                yield from _walk(child, f"{prefix}{entry.name}/", budget)
            finally:
                os.close(child)
        elif entry.is_file(follow_symlinks=False):
            budget[0] -= 1
            yield f"{prefix}{entry.name}", dir_fd, entry.name, entry.stat(follow_symlinks=False)


def _stamp(st: os.stat_result) -> datetime:
    return datetime.fromtimestamp(st.st_mtime, tz=timezone.utc)


def checkpoints(job_id: int) -> list[dict]:
    """Complete checkpoints, newest first: name, step, size, files, modified."""
    ckpt_fd = _open_dirs(job_id, [CHECKPOINTS])
    if ckpt_fd is None:
        return []
    found = []
    try:
        with os.scandir(ckpt_fd) as entries:
            steps = [(e.name, e.stat(follow_symlinks=False)) for e in entries
                     if e.name.startswith("step-") and e.name[5:].isdigit() and e.is_dir(follow_symlinks=False)]
        for name, st in steps:  # .tmp-step-N(-a<attempt>) is a checkpoint still being written
            step_fd = _open_dir_at(ckpt_fd, name)
            if step_fd is None:
                continue
            try:
                files = [(rel, s.st_size) for rel, _, _, s in _walk(step_fd, "", _budget())]
            finally:
                os.close(step_fd)
            found.append({"name": name, "step": int(name[5:]), "path": f"{CHECKPOINTS}/{name}",
                          "size": sum(size for _, size in files), "modified": _stamp(st),
                          "files": [rel for rel, _ in files]})
    finally:
        os.close(ckpt_fd)
    return sorted(found, key=lambda c: -c["step"])


def artifacts(job_id: int) -> list[dict]:
    """Every file of the run directory outside ``checkpoints/`` (and the attempt fence, which is bookkeeping):
    path, size, modified."""
    fd = _open_job_dir(job_id)
    if fd is None:
        return []
    try:
        return [{"path": rel, "size": st.st_size, "modified": _stamp(st)}
                for rel, _, _, st in _walk(fd, "", _budget(), skip=frozenset({CHECKPOINTS, FENCE_FILE}))]
    finally:
        os.close(fd)


class TarStream:
    """An uncompressed tar of an opened directory, produced chunk by chunk (checkpoints can be large).

    Owns ``dir_fd``; the response calls ``close()`` when it is done, whether or not it was read.
    """

    def __init__(self, dir_fd: int, arcroot: str):
        self.dir_fd, self.arcroot = dir_fd, arcroot
        self._chunks = self._generate()

    def __iter__(self) -> Iterator[bytes]:
        return self._chunks

    def close(self) -> None:
        self._chunks.close()
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def _generate(self) -> Iterator[bytes]:
        for rel, parent, name, _ in _walk(self.dir_fd, "", _budget()):
            try:
                fd = os.open(name, _LEAF_FLAGS, dir_fd=parent)  # swapped for a link since the listing: refused
            except OSError:
                continue
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if stat.S_ISREG(st.st_mode):
                    yield from _member(fh, f"{self.arcroot}/{rel}", st)
        yield b"\0" * 1024


def _member(fh, arcname: str, st: os.stat_result) -> Iterator[bytes]:
    info = tarfile.TarInfo(arcname)
    info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), 0o644
    yield info.tobuf(format=tarfile.PAX_FORMAT)
    sent = 0
    while sent < st.st_size and (chunk := fh.read(min(_CHUNK, st.st_size - sent))):
        sent += len(chunk)
        yield chunk
    if sent < st.st_size:  # the file shrank while we read it: keep the archive well-formed
        yield b"\0" * (st.st_size - sent)
    yield b"\0" * (-st.st_size % 512)
