"""``manage.py prune_logs [--days N]``: delete the logs of jobs that ended more than N days ago now
(the workers' heartbeat does it hourly when ``TRAINHUB_LOG_RETENTION_DAYS`` is set)."""
from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from trainhub.jobs import retention


class Command(BaseCommand):
    help = "Delete the log lines of jobs that ended more than N days ago (TRAINHUB_LOG_RETENTION_DAYS), keeping the jobs."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=None,
                            help="days a finished job keeps its log (default: TRAINHUB_LOG_RETENTION_DAYS)")

    def handle(self, *args, days=None, **options):
        days = settings.TRAINHUB_LOG_RETENTION_DAYS if days is None else days
        if days < 1:
            raise CommandError("set --days N (at least 1) or TRAINHUB_LOG_RETENTION_DAYS: logs are kept forever by default")
        total, more = 0, True
        while more:
            pruned, more = retention.prune_by_age(days)
            total += pruned
        self.stdout.write(f"deleted the logs of {total} job(s) that ended more than {days} days ago")
