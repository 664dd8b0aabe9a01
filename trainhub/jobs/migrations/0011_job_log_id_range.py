"""Each job's log line id range, for SQLite's log search (``Job.log_first_id``, ``Job.log_last_id``).

SQLite's FTS5 index (jobs/0006) holds every job's lines, so a search of one job listed the matches of all of
them and kept its own: 573 ms for a phrase that four other jobs' 1,000,000 lines hold and the job's own
never does (docs/BENCHMARKS.md, "Log search"). Line ids only grow (AUTOINCREMENT), so a job's lines lie
between its first and last line id, and FTS5 seeks to that rowid range. ``logs.append_lines`` keeps the range;
here it is filled for the lines already stored, in one pass over the ``(job, seq)`` index. A no-op on
PostgreSQL, whose chunk index holds the job (jobs/0009, jobs/0010)."""
from django.db import migrations, models

FILL = ("UPDATE jobs_job SET log_first_id = (SELECT min(id) FROM jobs_logline WHERE job_id = jobs_job.id), "
        "log_last_id = (SELECT max(id) FROM jobs_logline WHERE job_id = jobs_job.id)")


def fill(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(FILL)


class Migration(migrations.Migration):

    dependencies = [("jobs", "0010_logchunk_job_first_seq")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="log_first_id",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="log_last_id",
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=False),
    ]
