"""Helpers for the few statements written in SQL by hand (the claim's first look, each owner's best job, the API
token check, a job's submit and its transitions on PostgreSQL): the hot paths where building the ORM's query cost
more than running it, or where each statement is a round trip to the server."""
from __future__ import annotations

from functools import cache

from django.db import connection, models
from django.db.models import sql


@cache  # on the claim's path at every call: ~100 µs to build the first look's two lists, once per process now
def columns(model, alias: str = "") -> str:
    """``model``'s columns named one by one, for a hand-written SELECT (never ``*``).

    PostgreSQL prepares a statement a connection runs often (settings: ``prepare_threshold``); once a migration
    adds a column to a table such a statement reads with ``*``, it fails with "cached plan must not change
    result type" on every connection that prepared it, until that connection closes (a worker keeps its
    connections, the web server's pool keeps them for good). A named list keeps the statement's result type."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + connection.ops.quote_name(f.column) for f in model._meta.concrete_fields)


def writes_in_one_statement() -> bool:
    """Whether a write and its dependent insert can go to the database as one statement (a data-modifying
    ``WITH``): PostgreSQL runs it in one round trip where a transaction of two statements takes four (BEGIN,
    the two, COMMIT) — ~0.3–0.6 ms each on the sandbox. SQLite has no such ``WITH`` (and no round trips)."""
    return connection.vendor == "postgresql"


def insert_returning(obj: models.Model) -> tuple[str, tuple]:
    """The ``INSERT … RETURNING id`` Django's ``save()`` would send for the new ``obj`` (defaults and
    ``pre_save`` applied, values prepared for this database), to be wrapped in a larger statement."""
    meta = type(obj)._meta
    fields = [f for f in meta.local_concrete_fields if f is not meta.auto_field and not f.generated]
    query = sql.InsertQuery(type(obj))
    query.insert_values(fields, [obj])
    compiler = query.get_compiler(connection=connection)
    compiler.returning_fields = [meta.pk]
    [(text, params)] = compiler.as_sql()
    return text, tuple(params)


def update_returning(queryset: models.QuerySet, values: dict) -> tuple[str, tuple]:
    """The ``UPDATE … RETURNING id`` that ``queryset.update(**values)`` would send, to be wrapped in a larger
    statement (its filters on the model's own columns: a filter through a join is refused)."""
    query = queryset.query.chain(sql.UpdateQuery)
    query.add_update_values(values)
    compiler = query.get_compiler(connection=connection)
    text, params = compiler.as_sql()
    if query.related_updates or " JOIN " in text or not text:
        raise ValueError(f"not one UPDATE of {queryset.model._meta.db_table}: {text!r}")
    pk = connection.ops.quote_name(queryset.model._meta.pk.column)
    return f"{text} RETURNING {pk}", tuple(params)


def insert_from(model, source: str, source_column: str, values: dict) -> tuple[str, tuple]:
    """``INSERT INTO model (fk, …) SELECT <source_column>, %s, … FROM <source>``: a row of ``model`` for each
    row a ``WITH`` clause ``source`` returned, its first column from there, the others ``values`` (field
    name or attname, e.g. ``actor_id`` -> Python value, prepared here as the ORM would)."""
    q = connection.ops.quote_name
    given = [(model._meta.get_field(name), value) for name, value in values.items()]
    fk = next(f for f in model._meta.concrete_fields if f.column == source_column)
    cols = ", ".join(q(f.column) for f in [fk, *(f for f, _ in given)])
    params = tuple(f.get_db_prep_save(value, connection) for f, value in given)
    holes = ", ".join(["%s"] * len(given))
    return (f"INSERT INTO {q(model._meta.db_table)} ({cols}) SELECT {q(fk.target_field.column)}, {holes} "
            f"FROM {source}"), params


@cache
def _converters(model) -> list[tuple]:
    """Per concrete field of ``model``: the converters the ORM applies to the value a cursor returns (the
    backend's, e.g. SQLite's booleans and datetimes, then the field's own, e.g. JSON), with their column."""
    table = model._meta.db_table
    found = []
    for f in model._meta.concrete_fields:
        col = f.get_col(table)
        found.append((col, [*connection.ops.get_db_converters(col), *col.get_db_converters(connection)]))
    return found


def from_row(model, values) -> models.Model:
    """An instance of ``model`` from the values of ``columns(model)`` as a cursor returned them, converted as the
    ORM converts them: for a statement that reads several models' rows at once."""
    converted = []
    for (col, converters), value in zip(_converters(model), values, strict=True):
        for convert in converters:
            value = convert(value, col, connection)
        converted.append(value)
    return model.from_db(connection.alias, [f.attname for f in model._meta.concrete_fields], converted)
