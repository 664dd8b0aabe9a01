"""PostgreSQL's log search index, by chunks of lines instead of by line (``LogChunk``).

The per-line pg_trgm index of jobs/0005 put every stored line's trigrams into a GIN index: the database alone
then took ~71,000 short lines/s on the sandbox, and TrainHub ~48,000 (docs/BENCHMARKS.md, "Live logs"). Here a
statement trigger on ``jobs_logline`` writes, for each insert or update statement, one ``jobs_logchunk`` row per
job and ``CHUNK_LINES`` seqs: their text upper-cased and joined by newlines, under a pg_trgm GIN index that
holds the job id beside it (btree_gin). A batch of lines becomes a few index rows instead of hundreds; search
(``trainhub.jobs.logs``) asks the chunks, then checks the lines of the matching seq ranges.

The trigger is made before the lines already stored are copied into chunks, so a line written meanwhile is in
a chunk either way (twice at worst, which search merges). The per-line index goes last. ``CONCURRENTLY``:
writes go on while an existing database migrates. A no-op on SQLite (FTS5, jobs/0006), where the table
stays empty."""
import django.db.models.deletion
from django.db import migrations, models

CHUNK_LINES = 500
FUNCTION = "jobs_logchunk_add"
TRIGGERS = {"jobs_logchunk_insert": "INSERT", "jobs_logchunk_update": "UPDATE"}
INDEX = "logchunk_text_trgm"
INDEX_METHOD = "USING gin (job_id, text gin_trgm_ops)"  # the text is upper-cased already
INDEX_SQL = f"ON jobs_logchunk {INDEX_METHOD}"
CHUNKS_OF = (f"SELECT job_id, min(seq), max(seq), string_agg(upper(text), chr(10)) FROM {{lines}} "
             f"GROUP BY job_id, seq / {CHUNK_LINES}")
TRIGGER_SQL = [
    f"CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"INSERT INTO jobs_logchunk (job_id, first_seq, last_seq, text) {CHUNKS_OF.format(lines='new_lines')}; "
    f"RETURN NULL; END $$",
    *(f"CREATE OR REPLACE TRIGGER {name} AFTER {event} ON jobs_logline REFERENCING NEW TABLE AS new_lines "
      f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()" for name, event in TRIGGERS.items()),
]
BACKFILL_SQL = f"INSERT INTO jobs_logchunk (job_id, first_seq, last_seq, text) {CHUNKS_OF.format(lines='jobs_logline')}"
DROP_SQL = [*(f"DROP TRIGGER IF EXISTS {name} ON jobs_logline" for name in TRIGGERS),
            f"DROP FUNCTION IF EXISTS {FUNCTION}()"]
LINE_INDEX = "logline_text_trgm"  # jobs/0005's
LINE_INDEX_SQL = 'ON jobs_logline USING gin (job_id, (UPPER(("text")::text)) gin_trgm_ops)'


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in TRIGGER_SQL:
        schema_editor.execute(statement)
    schema_editor.execute(BACKFILL_SQL)
    schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} {INDEX_SQL}")
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {LINE_INDEX}")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {LINE_INDEX} {LINE_INDEX_SQL}")
    for statement in DROP_SQL:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [("jobs", "0008_logline_job_index_covered_by_seq")]

    operations = [
        migrations.CreateModel(
            name="LogChunk",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("first_seq", models.PositiveBigIntegerField()),
                ("last_seq", models.PositiveBigIntegerField()),
                ("text", models.TextField()),
                ("job", models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                          related_name="+", to="jobs.job")),
            ],
        ),
        migrations.RunPython(create, drop, elidable=False),
    ]
