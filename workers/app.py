"""The Celery app. Imported by the web to enqueue by task name; imports nothing of trainhub."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")

app = Celery("trainhub", include=["workers.tasks"])
app.conf.update(
    broker_url=os.environ.get("REDIS_URL", "redis://127.0.0.1:6380/0"),
    broker_connection_retry_on_startup=True,
    task_ignore_result=True,
    task_acks_late=True,  # a message is acknowledged only after the job ran (claims de-duplicate)
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,  # a busy worker must not hoard jobs other workers could run
    # Long trainings outlive any visibility timeout; a redelivered message is a no-op
    # thanks to the compare-and-set claim, so a long timeout only delays recovery.
    broker_transport_options={"visibility_timeout": 12 * 3600},
    task_serializer="json",
    accept_content=["json"],
    worker_hijack_root_logger=False,
    # Celery's Django fixup closes every connection before and after each task unless this is set;
    # the worker closes old and broken ones itself (workers.tasks: Django's close_old_connections,
    # which honours CONN_MAX_AGE and CONN_HEALTH_CHECKS), so a task's thread keeps its connection.
    CELERY_DB_REUSE_MAX=2**31,
)
