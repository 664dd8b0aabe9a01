"""A btree over each job's log chunks in seq order (``LogChunk``, jobs/0009).

Search used to read a job's first 10,000 lines one by one before it asked the chunks' trigram index (a query
that matches often is answered there, where the trigram index would recheck every chunk of the job): 4–17 ms
of a search with no match. It now looks at the chunks of those lines instead, ~20 rows found through this
index (``trainhub.jobs.logs._chunk_lines``). Retention's deletes of a seq range of chunks use it too. The chunks
are ~1/500 as many rows as the lines, so building it takes a moment even on a large database."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [("jobs", "0009_logchunk")]

    operations = [
        migrations.AddIndex(
            model_name="logchunk",
            index=models.Index(fields=["job", "first_seq"], name="logchunk_job_first_seq"),
        ),
    ]
