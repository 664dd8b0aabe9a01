"""Every benchmark writes its raw result here: ``bench/results/<name>-<UTC time>.json`` with the command,
the machine, the date, the versions that matter and the raw samples, so a figure in docs/ can be traced
to the run that produced it (docs/BENCHMARKS.md and docs/RELIABILITY.md link these files)."""
from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
PACKAGES = ("Django", "celery", "redis", "hiredis", "psycopg", "torch", "deepspeed", "uvicorn", "uvloop", "httptools")
#: settings in the environment that change what a bench measures (uvicorn's event loop and HTTP parser, a
#: TrainHub limit, a path that hides a package for an A/B run); recorded as they were
SETTINGS = ("UVICORN_", "TRAINHUB_", "PYTHONPATH")


def machine() -> dict:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
    return {"host": platform.node(), "cpus": os.cpu_count(), "memory_gib": round(mem / 2**30, 1),
            "platform": platform.platform(), "python": platform.python_version(),
            "load_at_end": list(os.getloadavg())}


def versions() -> dict:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def settings() -> dict:
    """The environment's ``SETTINGS`` this run had, without secrets."""
    return {k: v for k, v in sorted(os.environ.items())
            if k.startswith(SETTINGS) and not any(word in k for word in ("SECRET", "PASSWORD", "TOKEN", "KEY"))}


def commit() -> str:
    """The checkout's commit, with "+changes" when its tracked files differ from it."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=root).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def write(name: str, result: dict, *, database: str = "", command: list[str] | None = None) -> Path:
    """Write ``result`` (summary figures and raw samples) with its provenance; returns the file's path.
    ``command``: the bench's own argv when another script ran it (default: this process's)."""
    now = datetime.now(timezone.utc)
    record = {"bench": name, "date": now.isoformat(timespec="seconds"), "commit": commit(),
              "command": " ".join(shlex.quote(a) for a in [".venv/bin/python", *(command or sys.argv)]),
              "machine": machine(), "versions": versions(),
              "environment": settings(), "database": database or "sqlite", "result": result}
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}-{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"raw result: {path.relative_to(RESULTS.parent.parent)}", file=sys.stderr)
    return path
