"""The package arrows hold: import-linter's contracts in pyproject.toml ([tool.importlinter])."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_db

ROOT = Path(__file__).resolve().parent.parent


def test_every_import_contract_is_kept():
    # installed beside this interpreter by requirements-dev.txt
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert lint, "lint-imports is not installed: pip install -r requirements-dev.txt"
    # This checkout's packages, not whichever trainhub happens to be first on the path.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([lint, "--no-cache", "--no-logo"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"an import contract is broken:\n{result.stdout}\n{result.stderr}"
