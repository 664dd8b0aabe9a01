# GpuLease and GangMember now belong to the runs app (runs/0001_initial). Their tables stay:
# this migration only removes them from the pools app's state.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('pools', '0004_retention_help'),
        ('runs', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='GangMember'),
                migrations.DeleteModel(name='GpuLease'),
            ],
            database_operations=[],
        ),
    ]
