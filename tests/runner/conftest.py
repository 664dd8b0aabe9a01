"""Helpers for runner tests: write a spec, launch it the way the executor does, read events.

No database, no Django: run with ``python -m pytest tests/runner -p no:django``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from workers.runner import launch
from workers.runner.config import parse_spec
from workers.runner.report import read_events

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    run_dir: Path

    @property
    def events(self) -> list[dict]:
        return read_events(self.run_dir)[0]

    def of_type(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]

    def metrics(self) -> list[dict]:
        return [e["values"] for e in self.of_type("metrics")]


def write_spec(tmp_path: Path, spec: dict, name: str = "job.yaml") -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def command(spec: dict, tmp_path: Path, run_dir: Path | None = None, workspace: Path | None = None):
    """(argv, env, cwd, run_dir) exactly as the executor would build them."""
    config = write_spec(tmp_path, spec)
    parsed = parse_spec(spec)
    run_dir = run_dir or tmp_path / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    env = launch.env(parsed, run_dir, workspace_dir=workspace)
    env["OMP_NUM_THREADS"] = "1"
    return (launch.argv(parsed, config, run_dir, workspace_dir=workspace), env,
            launch.cwd(parsed, run_dir, workspace), run_dir)


def run_job(spec: dict, tmp_path: Path, run_dir: Path | None = None, timeout: float = 240) -> Result:
    argv, env, cwd, run_dir = command(spec, tmp_path, run_dir)
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr, run_dir)


def run_module(args: list[str], tmp_path: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "workers.runner", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def digits_spec() -> dict:
    return {
        "name": "digits-test",
        "data": {"dataset": "digits", "batch_size": 64},
        "model": {"name": "mlp", "hidden": 64},
        "train": {"epochs": 3, "lr": 0.003, "seed": 0, "log_every_steps": 5},
        "checkpoint": {"every_steps": 10, "keep_last": 2},
    }


def dump(obj) -> str:
    return json.dumps(obj, indent=1)
