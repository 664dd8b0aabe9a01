from datetime import timedelta

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

_queue_name = RegexValidator(r"^[A-Za-z0-9_.-]+$", "letters, digits, '.', '_' and '-' only")


class WorkerPool(models.Model):
    class Kind(models.TextChoices):
        CPU = "cpu", "CPU"
        GPU = "gpu", "GPU"

    name = models.CharField(max_length=100, unique=True, validators=[_queue_name])
    kind = models.CharField(max_length=3, choices=Kind.choices, default=Kind.CPU)
    queue = models.CharField(max_length=100, unique=True, validators=[_queue_name],
                             help_text="Celery queue its workers consume")
    enabled = models.BooleanField(default=True, help_text="disabled pools accept no new jobs")
    description = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Worker(models.Model):
    #: a worker whose last heartbeat is older than this is shown offline
    OFFLINE_AFTER = timedelta(seconds=60)

    hostname = models.CharField(max_length=255, unique=True, help_text="Celery node name")
    pool = models.ForeignKey(WorkerPool, on_delete=models.CASCADE, related_name="workers")
    started_at = models.DateTimeField(default=timezone.now)
    last_heartbeat = models.DateTimeField(default=timezone.now)
    info = models.JSONField(default=dict, blank=True, help_text="CPUs, memory, GPUs, versions")

    class Meta:
        ordering = ["pool__name", "hostname"]

    def __str__(self) -> str:
        return self.hostname

    @property
    def online(self) -> bool:
        return timezone.now() - self.last_heartbeat < self.OFFLINE_AFTER


class Workspace(models.Model):
    """A directory of a team's own training code that script-mode jobs may run."""

    name = models.CharField(max_length=100, unique=True, validators=[_queue_name])
    path = models.CharField(max_length=1000, help_text="absolute directory on the worker hosts")
    description = models.CharField(max_length=300, blank=True)

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if not self.path.startswith("/"):
            raise ValidationError({"path": "must be an absolute directory path, e.g. /srv/teams/vision"})
