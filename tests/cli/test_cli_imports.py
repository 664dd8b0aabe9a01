"""The CLI stays light: importing and running it loads neither Django nor torch."""
import subprocess
import sys

import pytest

pytestmark = pytest.mark.no_db


def test_the_cli_imports_neither_django_nor_torch():
    code = ("import sys, trainhub.cli, trainhub.cli.follow; "
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'torch', 'celery')); "
            "print(heavy); sys.exit(1 if heavy else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout


def test_help_lists_every_command():
    result = subprocess.run([sys.executable, "-m", "trainhub.cli", "--help"], capture_output=True, text=True, timeout=60)
    # the first word of each line under "Commands:", so "ls" is not found inside "pools"
    listed = {line.split()[0] for line in result.stdout.split("Commands:", 1)[-1].splitlines() if line.strip()}
    for command in ("login", "submit", "ls", "status", "logs", "cancel", "clone", "download", "files", "pools"):
        assert command in listed
