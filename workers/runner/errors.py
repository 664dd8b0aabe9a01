"""``SpecError``: the one error every spec check raises, in a module of its own so the spec
model (config) and the FedML translation (fedml) can both raise it without importing each other."""
from __future__ import annotations


class SpecError(ValueError):
    """A spec that cannot run. ``errors`` maps a dotted field path to a fix-it message."""

    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
