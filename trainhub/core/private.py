"""Files only the installation's user may read (the secret key, the SQLite database), created with
mode 0600 from their first moment — opened with that mode, never chmod'ed afterwards, so no other
user can open them in between. Used by the settings, before Django is set up."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def private_dir(path: Path) -> None:
    """``path`` exists; a new one is 0700 (an existing one keeps the mode its owner gave it)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def private_file(path: Path, content: str = "") -> bool:
    """Create ``path`` with ``content``, mode 0600, complete or not at all (a reader never sees it half
    written). False when it exists already (another process may have just won the race)."""
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mkstemp: 0600
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(content)
        os.link(tmp, path)  # atomic, and fails if the file exists
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def tighten(path: Path) -> None:
    """An existing file from an older installation that others could read becomes 0600."""
    try:
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
    except FileNotFoundError:
        pass
