# GpuLease and GangMember moved here from pools. Their tables stay as they are
# (``pools_gpulease``, ``pools_gangmember``): this migration changes Django's state only.

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('jobs', '0003_job_interruptions'),
        ('pools', '0004_retention_help'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='GpuLease',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('index', models.PositiveSmallIntegerField()),
                        ('lease_token', models.PositiveIntegerField(help_text="the job's lease token when taken")),
                        ('taken_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('job', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='gpu_leases', to='jobs.job')),
                        ('worker', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='gpu_leases', to='pools.worker')),
                    ],
                    options={
                        'db_table': 'pools_gpulease',
                        'ordering': ['worker', 'index'],
                        'constraints': [models.UniqueConstraint(fields=('worker', 'index'), name='gpulease_worker_index')],
                    },
                ),
                migrations.CreateModel(
                    name='GangMember',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('attempt', models.PositiveIntegerField()),
                        ('node_rank', models.PositiveSmallIntegerField()),
                        ('address', models.CharField(blank=True, help_text='rank 0: the c10d rendezvous host:port', max_length=300)),
                        ('lease_token', models.PositiveIntegerField(help_text="the job's lease token once the gang starts")),
                        ('joined_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('done', models.BooleanField(default=False, help_text="this member's thread has let go (slot free)")),
                        ('job', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='gang_members', to='jobs.job')),
                        ('worker', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='gang_members', to='pools.worker')),
                    ],
                    options={
                        'db_table': 'pools_gangmember',
                        'ordering': ['job', 'attempt', 'node_rank'],
                        'constraints': [models.UniqueConstraint(fields=('job', 'attempt', 'worker'), name='gangmember_one_place_per_worker'), models.UniqueConstraint(fields=('job', 'attempt', 'node_rank'), name='gangmember_one_worker_per_rank')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
