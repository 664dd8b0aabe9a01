"""The log search index on SQLite (the embedded default): an FTS5 ``trigram`` table over the log lines'
text (external content: no second copy of the text), filled from the lines already there.

Lines are added to it in bulk, not one by one: an ``AFTER INSERT`` trigger cost ~20 µs per line
(FTS5 flushes its pending terms at every statement's savepoint, so each row became a segment of its
own) against ~1–2.5 µs per line for one ``INSERT … SELECT`` over many rows — it would have cut log
throughput to a quarter (docs/BENCHMARKS.md, "Log search"). So ``jobs_logline_fts_state.indexed_to``
says up to which line id the index holds; ``logs.fts_catch_up`` (called by the log writer once
``FTS_CATCH_UP`` lines wait) indexes the rest, and search reads lines past that mark directly.
Triggers keep the indexed lines true when they change or go (retention's cuts, a job's deletion).
Ids only grow (AUTOINCREMENT, one writer at a time), so nothing lands below the mark later.
A no-op on PostgreSQL, which has its pg_trgm index (0005). Where this SQLite lacks FTS5 or its
trigram tokenizer (before 3.34), nothing is built and search stays a scan (``logs.fts_ready``).

Careful with later migrations of ``LogLine`` on SQLite: Django rebuilds an altered table (new table,
copy, drop, rename), which drops these triggers; such a migration must run ``SQL`` again
(``tests/jobs/test_log_search.py`` fails if the triggers are missing)."""
import logging

from django.db import migrations

TABLE = "jobs_logline_fts"
STATE = f"{TABLE}_state"
INDEXED = f"old.id <= (SELECT indexed_to FROM {STATE})"
SQL = [
    # detail=none, columnsize=0: no positions, no per-line sizes — half the cost of a line (1.1 against
    # 2.3 µs); search asks for all of a query's trigrams and checks the lines themselves
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE} USING fts5(text, content='jobs_logline', content_rowid='id', "
    "tokenize='trigram', detail=none, columnsize=0)",
    f"CREATE TABLE IF NOT EXISTS {STATE} (indexed_to INTEGER NOT NULL)",
    f"DELETE FROM {STATE}",
    f"INSERT INTO {STATE} (indexed_to) SELECT coalesce(max(id), 0) FROM jobs_logline",
    f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild')",  # every line stored so far
    f"CREATE TRIGGER IF NOT EXISTS {TABLE}_delete AFTER DELETE ON jobs_logline WHEN {INDEXED} BEGIN "
    f"INSERT INTO {TABLE}({TABLE}, rowid, text) VALUES ('delete', old.id, old.text); END",
    f"CREATE TRIGGER IF NOT EXISTS {TABLE}_update AFTER UPDATE OF text ON jobs_logline WHEN {INDEXED} BEGIN "
    f"INSERT INTO {TABLE}({TABLE}, rowid, text) VALUES ('delete', old.id, old.text); "
    f"INSERT INTO {TABLE}(rowid, text) VALUES (new.id, new.text); END",
]
DROP = [f"DROP TRIGGER IF EXISTS {TABLE}_{event}" for event in ("insert", "delete", "update")] + [
    f"DROP TABLE IF EXISTS {TABLE}", f"DROP TABLE IF EXISTS {STATE}"]


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    import sqlite3

    try:
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("CREATE VIRTUAL TABLE temp.trainhub_fts_probe USING fts5(t, tokenize='trigram')")
            cursor.execute("DROP TABLE temp.trainhub_fts_probe")
    except Exception as exc:  # noqa: BLE001 — sqlite3.OperationalError through Django's wrapper
        logging.getLogger(__name__).warning(
            "SQLite %s has no FTS5 trigram tokenizer (%s): log search stays a scan of the job's lines; "
            "SQLite 3.34 or newer with FTS5 gives it an index", sqlite3.sqlite_version, exc)
        return
    for statement in SQL:
        schema_editor.execute(statement)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    for statement in DROP:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0005_log_and_name_search_indexes")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
