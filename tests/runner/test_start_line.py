"""The runner says it started before the slow part of its start (torch, the workload's libraries,
the data): a job's log shows a line within the interpreter's start, not seconds later."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.runner.conftest import ROOT, write_spec


def test_the_runner_prints_its_start_line_before_it_imports_torch(tmp_path):
    config = write_spec(tmp_path, {"name": "early", "data": {"dataset": "iris"}, "model": {"name": "logreg"},
                                   "train": {"epochs": 1}})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    # -X importtime reports each import on stderr as it finishes; one pipe for both keeps their order
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "workers.runner", "--config", str(config),
                           "--run-dir", str(tmp_path / "run")], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=240)

    assert proc.returncode == 0, proc.stdout[-2000:]
    lines = proc.stdout.splitlines()
    start = lines.index("early: starting (mode centralized, strategy single), loading torch and the data")
    torch_done = next(i for i, line in enumerate(lines) if re.match(r"import time:.*\|\s+torch$", line))
    sklearn_done = next(i for i, line in enumerate(lines) if re.match(r"import time:.*\|\s+sklearn$", line))
    assert start < torch_done and start < sklearn_done
    assert not [line for line in lines[:start] if not line.startswith("import time:")], "nothing printed before it"
    assert any(line.startswith("early: mode centralized, strategy single, 1 rank(s)") for line in lines[start:])
