"""Helpers for the few statements written in SQL by hand (the claim's first look, each owner's best job, the API
token check): the hot paths where building the ORM's query cost more than running it."""
from __future__ import annotations

from functools import cache

from django.db import connection


@cache  # on the claim's path at every call: ~100 µs to build the first look's two lists, once per process now
def columns(model, alias: str = "") -> str:
    """``model``'s columns named one by one, for a hand-written SELECT (never ``*``).

    PostgreSQL prepares a statement a connection runs often (settings: ``prepare_threshold``); once a migration
    adds a column to a table such a statement reads with ``*``, it fails with "cached plan must not change
    result type" on every connection that prepared it, until that connection closes (a worker keeps its
    connections, the web server's pool keeps them for good). A named list keeps the statement's result type."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + connection.ops.quote_name(f.column) for f in model._meta.concrete_fields)
