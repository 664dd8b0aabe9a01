"""``make run``'s var/ keeps the SQLite database and the secret key: a fresh installation creates
them readable by its own user only (0600, the folder 0700), under a umask that would make them
world-readable, and an older installation's world-readable files are closed on the next start."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_db

ROOT = Path(__file__).resolve().parents[2]


def manage(var: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TRAINHUB_SECRET_KEY")}
    env["TRAINHUB_VAR_DIR"] = str(var)
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, timeout=300,
                   preexec_fn=lambda: os.umask(0o022), capture_output=True)


def mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


@pytest.mark.slow
def test_a_fresh_var_dir_gets_a_private_database_and_secret_key(tmp_path):
    var = tmp_path / "var"
    manage(var, "migrate", "-v0")
    assert mode(var) == "0o700"
    assert mode(var / "secret_key") == "0o600" and len((var / "secret_key").read_text()) > 40
    assert mode(var / "trainhub.sqlite3") == "0o600" and (var / "trainhub.sqlite3").stat().st_size > 0
    for journal in var.glob("trainhub.sqlite3-*"):
        assert mode(journal) == "0o600", journal
    assert not list(var.glob(".*"))  # no temporary file left behind


def test_an_older_installations_world_readable_files_are_closed_on_start(tmp_path):
    var = tmp_path / "var"
    var.mkdir()
    (var / "secret_key").write_text("an-old-key-" * 5)
    (var / "trainhub.sqlite3").write_bytes(b"")
    for name in ("secret_key", "trainhub.sqlite3"):
        (var / name).chmod(0o644)
    manage(var, "check")
    assert mode(var / "secret_key") == "0o600" and mode(var / "trainhub.sqlite3") == "0o600"
    assert (var / "secret_key").read_text() == "an-old-key-" * 5  # the key is kept, sessions survive
