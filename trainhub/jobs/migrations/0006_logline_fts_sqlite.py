"""The log search index on SQLite (the embedded default): an FTS5 ``trigram`` table over the log lines'
text, kept in step by triggers on ``jobs_logline`` (so every writer — the executor, gang nodes,
retention's cuts, a test's ``bulk_create`` — keeps it true), filled from the lines already there.
External content (``content='jobs_logline'``): the index holds no second copy of the text.
A no-op on PostgreSQL, which has its pg_trgm index (0005). Where this SQLite lacks FTS5 or its
trigram tokenizer (before 3.34), nothing is built and search stays a scan (``logs.fts_ready``).

Careful with later migrations of ``LogLine`` on SQLite: Django rebuilds an altered table (new table,
copy, drop, rename), which drops these triggers; such a migration must run ``SQL`` again
(``tests/jobs/test_log_search.py`` fails if the triggers are missing)."""
import logging

from django.db import migrations

TABLE = "jobs_logline_fts"
SQL = [
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE} USING fts5(text, content='jobs_logline', content_rowid='id', "
    "tokenize='trigram')",
    f"CREATE TRIGGER IF NOT EXISTS {TABLE}_insert AFTER INSERT ON jobs_logline BEGIN "
    f"INSERT INTO {TABLE}(rowid, text) VALUES (new.id, new.text); END",
    f"CREATE TRIGGER IF NOT EXISTS {TABLE}_delete AFTER DELETE ON jobs_logline BEGIN "
    f"INSERT INTO {TABLE}({TABLE}, rowid, text) VALUES ('delete', old.id, old.text); END",
    f"CREATE TRIGGER IF NOT EXISTS {TABLE}_update AFTER UPDATE OF text ON jobs_logline BEGIN "
    f"INSERT INTO {TABLE}({TABLE}, rowid, text) VALUES ('delete', old.id, old.text); "
    f"INSERT INTO {TABLE}(rowid, text) VALUES (new.id, new.text); END",
    f"INSERT INTO {TABLE}({TABLE}) VALUES ('rebuild')",  # the lines stored before this migration
]
DROP = [f"DROP TRIGGER IF EXISTS {TABLE}_{event}" for event in ("insert", "delete", "update")] + [
    f"DROP TABLE IF EXISTS {TABLE}"]


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
