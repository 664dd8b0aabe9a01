"""Drop the log lines' own index on ``job_id``: the unique ``(job_id, seq)`` index serves every lookup by job
(reads, search, cascade deletes), and the second index cost every stored line another B-tree insert.

Only the index goes (``DROP INDEX``): Django's ``AlterField`` would rebuild the whole table on SQLite and
lose the triggers that keep the FTS5 search index true (jobs/0006)."""
import django.db.models.deletion
from django.db import migrations, models

INDEX = "jobs_logline_job_id_3ddf563f"  # the name Django gave it in jobs/0001


class Migration(migrations.Migration):

    dependencies = [
        ("jobs", "0007_job_metrics_note"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="logline",
                    name="job",
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name="+", to="jobs.job"),
                ),
            ],
            database_operations=[
                migrations.RunSQL(f"DROP INDEX IF EXISTS {INDEX}",
                                  reverse_sql=f"CREATE INDEX IF NOT EXISTS {INDEX} ON jobs_logline (job_id)"),
            ],
        ),
    ]
