"""Trigram indexes for the log search, "first error" and the job list's name search on PostgreSQL
(pg_trgm; btree_gin lets one GIN index hold the job id beside the text). Django's ``icontains``
compares ``UPPER(col::text) LIKE UPPER(%s)`` on PostgreSQL, so the indexes are on that expression.
Built ``CONCURRENTLY``: log writes go on while an existing database builds them. A no-op on SQLite,
where search stays a scan of the job's rows (docs/BENCHMARKS.md, "Log search")."""
from django.db import migrations

INDEXES = {
    "logline_text_trgm": 'ON jobs_logline USING gin (job_id, (UPPER(("text")::text)) gin_trgm_ops)',
    "job_name_trgm": 'ON jobs_job USING gin ((UPPER(("name")::text)) gin_trgm_ops)',
}


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from django.db import DatabaseError

    for extension in ("pg_trgm", "btree_gin"):
        try:
            schema_editor.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
        except DatabaseError as exc:  # both are trusted extensions since PostgreSQL 13: the database owner may
            raise RuntimeError(f"the log search index needs the PostgreSQL extension {extension} ({exc}); "
                               f"run CREATE EXTENSION {extension}; in this database as its owner or a "
                               f"superuser, then migrate again") from exc
    for name, definition in INDEXES.items():
        schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} {definition}")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [("jobs", "0004_fair_claim_index")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
