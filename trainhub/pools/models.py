import shutil
from datetime import timedelta
from functools import cache

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import connection, models
from django.utils import timezone

from trainhub.core.sql import columns
from trainhub.pools import slurm
from workers.runner.modes import MODES  # the spec model's table of modes

_queue_name = RegexValidator(r"^[A-Za-z0-9_.-]+$", "letters, digits, '.', '_' and '-' only")
#: the smallest per-job log cap a pool may set: below it a cut could reach lines a live viewer
#: is still being sent (``trainhub.jobs.retention`` cuts; the pool only validates its setting)
LOG_RETENTION_MINIMUM = 10_000


def default_sandbox() -> str:
    """A new pool sandboxes its jobs where bubblewrap is installed (``workers.sandbox``)."""
    return "required" if shutil.which("bwrap") else "off"


class ForGroupsManager(models.Manager):
    """For a model whose ``groups`` say who may use a row (none selected: everyone): a pool, who may submit to it;
    a data root, whose jobs may read it."""

    def for_user(self, user, *, name: str | None = None) -> list:
        """The rows by name (or the one named ``name``: a list of one, or empty), each with ``user_allowed``:
        whether ``user`` may use it. The one rule for it: the row names no groups, the user is in one of them,
        or is a superuser (``None``, the system itself, may too). One statement for any number of rows, its SQL
        built once per process: the submit reads its pool with it, on the submit -> running path, where the
        ORM's query cost more to build than to run (~0.6 ms)."""
        pk = getattr(user, "pk", None)
        rows = list(self.raw(_for_user_sql(self.model, by_name=name is not None), [pk] if name is None else [pk, name]))
        everyone = user is None or user.is_superuser
        for row in rows:
            row.user_allowed = everyone or bool(row.member) or not row.restricted
        return rows


@cache  # the tables and their quoting are fixed for a process
def _for_user_sql(model, *, by_name: bool) -> str:
    q = connection.ops.quote_name
    rows, users = model._meta.get_field("groups"), get_user_model()._meta.get_field("groups")
    row_groups, row_id, group_id = q(rows.m2m_db_table()), q(rows.m2m_column_name()), q(rows.m2m_reverse_name())
    member_of, user_id, users_group = q(users.m2m_db_table()), q(users.m2m_column_name()), q(users.m2m_reverse_name())
    pk = q(model._meta.pk.column)
    where = "WHERE r.name = %s" if by_name else "ORDER BY r.name"
    return f"""SELECT {columns(model, "r")},
                      EXISTS (SELECT 1 FROM {row_groups} a WHERE a.{row_id} = r.{pk}) AS restricted,
                      EXISTS (SELECT 1 FROM {row_groups} a JOIN {member_of} m ON m.{users_group} = a.{group_id}
                              WHERE a.{row_id} = r.{pk} AND m.{user_id} = %s) AS member
               FROM {q(model._meta.db_table)} r {where}"""


class WorkerPool(models.Model):
    class Kind(models.TextChoices):
        CPU = "cpu", "CPU"
        GPU = "gpu", "GPU"
        SLURM = "slurm", "Slurm (jobs run as sbatch jobs of a cluster)"

    class Sandbox(models.TextChoices):
        REQUIRED = "required", "required: every job in a bubblewrap sandbox; fails where bwrap is missing"
        OFF = "off", "off: jobs run as the worker's user and see what it sees"

    class State(models.TextChoices):
        ENABLED = "enabled", "enabled: takes and runs jobs"
        DRAINING = "draining", "draining: running jobs finish, queued jobs wait"
        DISABLED = "disabled", "disabled: submissions refused, queued jobs wait"

    name = models.CharField(max_length=100, unique=True, validators=[_queue_name])
    kind = models.CharField(max_length=5, choices=Kind.choices, default=Kind.CPU)
    queue = models.CharField(max_length=100, unique=True, validators=[_queue_name],
                             help_text="Celery queue its workers consume")
    state = models.CharField(max_length=8, choices=State.choices, default=State.ENABLED)
    #: derived from ``state`` on save (kept for readers that filter on it): the pool accepts submissions
    enabled = models.BooleanField(default=True, editable=False)
    description = models.CharField(max_length=300, blank=True)
    slots_per_worker = models.PositiveSmallIntegerField(
        default=1, help_text="jobs one worker runs at once; read at every claim, so a change needs no restart "
                             "(up to the worker's --slots)")
    gpus_per_worker = models.PositiveSmallIntegerField(
        default=0, help_text="GPUs each worker offers to jobs; 0 = all it detects")
    modes = models.CharField(max_length=100, blank=True,
                             help_text="comma-separated modes accepted (centralized, ddp, deepspeed, llm, script); "
                                       "empty = all")
    default_priority = models.SmallIntegerField(default=0, help_text="for jobs whose spec sets no priority")
    max_priority = models.SmallIntegerField(
        default=50, help_text="higher priorities are refused at submit (staff may exceed)")
    groups = models.ManyToManyField(Group, blank=True, help_text="who may submit; none selected = everyone")
    # Per-user limits a normal user cannot exceed (staff and superusers may); 0 = no limit.
    max_running_per_user = models.PositiveSmallIntegerField(
        default=0, help_text="running jobs per user in this pool; more wait in the queue; 0 = no limit")
    max_gpus_per_user = models.PositiveSmallIntegerField(
        default=0, help_text="GPUs held by one user's running jobs in this pool; more wait in the queue; 0 = no limit")
    max_queued_per_user = models.PositiveIntegerField(
        default=0, help_text="queued jobs per user in this pool; more are refused at submit; 0 = no limit")
    max_timeout_minutes = models.PositiveIntegerField(
        default=0, help_text="longest timeout_minutes accepted at submit; 0 = no limit (the spec allows 30 days)")
    max_restarts_limit = models.PositiveSmallIntegerField(
        default=5, help_text="highest max_restarts accepted at submit; 0 = no limit (the spec allows 100)")
    default_timeout_minutes = models.PositiveIntegerField(
        default=0, help_text="for jobs whose spec sets no timeout; 0 = the spec's default (120)")
    log_retention_lines = models.PositiveIntegerField(
        default=0, help_text="log lines kept per finished job (the first and the newest; a marker "
                             "where the middle was cut); 0 = the workers' TRAINHUB_LOG_RETENTION (by default 1,000,000)")
    # A Slurm pool's jobs (kind slurm): see docs/POOLS.md, "Slurm pools"
    partition = models.CharField(max_length=100, blank=True, validators=[_queue_name],
                                 help_text="Slurm partition (sbatch --partition); empty = the cluster's default")
    account = models.CharField(max_length=100, blank=True, validators=[_queue_name],
                               help_text="Slurm account (--account) for users the mapping does not name; "
                                         "empty = Slurm's default for the user")
    qos = models.CharField(max_length=100, blank=True, validators=[_queue_name], verbose_name="QOS",
                           help_text="Slurm quality of service (--qos); empty = none")
    slurm_conf = models.CharField(max_length=500, blank=True, verbose_name="SLURM_CONF",
                                  help_text="path of slurm.conf on the submit host; empty = Slurm's default")
    slurm_accounts = models.TextField(blank=True, verbose_name="Slurm accounts",
                                      help_text="user → account, one per line: `alice = proj-a` or "
                                                "`@group = proj-b`; the first match wins, else the account above")
    sandbox = models.CharField(
        max_length=8, choices=Sandbox.choices, default=default_sandbox,
        help_text="required: each job sees only its own run directory, the project and its workspace, no worker "
                  "secrets and only its leased GPUs (needs: apt-get install bubblewrap); off: run unsandboxed")
    sandbox_network = models.BooleanField(
        default=False, help_text="sandboxed single-node jobs may use the network (multi-node jobs always may, "
                                 "for their rendezvous)")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ForGroupsManager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        if self.pk is None and not self.enabled and self.state == self.State.ENABLED:
            self.state = self.State.DISABLED  # created the old way, WorkerPool(enabled=False)
        self.enabled = self.state != self.State.DISABLED
        if kwargs.get("update_fields") is not None and "state" in kwargs["update_fields"]:
            kwargs["update_fields"] = {*kwargs["update_fields"], "enabled"}
        super().save(*args, **kwargs)

    def clean(self) -> None:
        bad = [m for m in self.mode_list if m not in MODES]
        if bad:
            raise ValidationError({"modes": f"unknown mode(s) {', '.join(bad)}; use some of {', '.join(MODES)}"})
        if self.default_priority > self.max_priority:
            raise ValidationError({"default_priority": "must not exceed the maximum priority"})
        if self.max_timeout_minutes and self.default_timeout_minutes > self.max_timeout_minutes:
            raise ValidationError({"default_timeout_minutes": "must not exceed the maximum timeout (or set it to 0)"})
        if 0 < self.log_retention_lines < LOG_RETENTION_MINIMUM:
            raise ValidationError({"log_retention_lines": f"keep at least {LOG_RETENTION_MINIMUM:,} lines (or 0 for the workers' default)"})
        slurm.parse_accounts(self.slurm_accounts)
        if self.slurm_conf and not self.slurm_conf.startswith("/"):
            raise ValidationError({"slurm_conf": "give the absolute path of slurm.conf, e.g. /etc/slurm/slurm.conf"})

    @property
    def backend(self) -> str:
        """The ``workers.backends`` name its jobs run through."""
        return "slurm" if self.kind == self.Kind.SLURM else "local"

    @property
    def has_gpus(self) -> bool:
        return self.kind in (self.Kind.GPU, self.Kind.SLURM)

    def slurm_account_for(self, user) -> str:
        return slurm.account_for(self.slurm_accounts, self.account, user)

    @property
    def mode_list(self) -> list[str]:
        return [m.strip() for m in self.modes.split(",") if m.strip()]

    @property
    def accepts_submissions(self) -> bool:
        return self.enabled and self.state != self.State.DISABLED

    @property
    def starts_jobs(self) -> bool:
        return self.state == self.State.ENABLED


def offline_after() -> timedelta:
    """A worker whose last heartbeat is older than this is shown offline (TRAINHUB_OFFLINE_SECONDS, default 60)."""
    return timedelta(seconds=settings.TRAINHUB_OFFLINE_SECONDS)


class Worker(models.Model):
    hostname = models.CharField(max_length=255, unique=True, help_text="Celery node name")
    pool = models.ForeignKey(WorkerPool, on_delete=models.CASCADE, related_name="workers")
    started_at = models.DateTimeField(default=timezone.now)
    last_heartbeat = models.DateTimeField(default=timezone.now)
    info = models.JSONField(default=dict, blank=True, help_text="CPUs, memory, GPUs, versions")
    gpu_count = models.PositiveSmallIntegerField(default=0, help_text="GPUs detected (NVML) or declared")
    threads = models.PositiveSmallIntegerField(default=1, help_text="most jobs this process can run at once")

    class Meta:
        ordering = ["pool__name", "hostname"]

    def __str__(self) -> str:
        return self.hostname

    @property
    def online(self) -> bool:
        return timezone.now() - self.last_heartbeat < offline_after()

    @property
    def heartbeat_age(self) -> float:
        return (timezone.now() - self.last_heartbeat).total_seconds()

    @property
    def usable_gpus(self) -> int:
        cap = self.pool.gpus_per_worker
        return min(self.gpu_count, cap) if cap else self.gpu_count


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


class DataRoot(models.Model):
    """A directory of data, models or tokenizers that jobs' spec paths (``data.path``,
    ``llm.base_model``, ``llm.tokenizer``) may name. Jobs see it read-only; with groups
    selected, only their members' jobs may use it (``trainhub.jobs.specpaths``)."""

    name = models.CharField(max_length=100, unique=True, validators=[_queue_name])
    path = models.CharField(max_length=1000, help_text="absolute directory on the worker hosts, e.g. /srv/data")
    description = models.CharField(max_length=300, blank=True)
    groups = models.ManyToManyField(Group, blank=True, help_text="whose jobs may read it; none selected = everyone")

    objects = ForGroupsManager()

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        import os

        if not self.path.startswith("/") or self.path.rstrip("/") == "":
            raise ValidationError({"path": "must be an absolute directory path other than /, e.g. /srv/data"})
        root = os.path.realpath(self.path)
        for what, inner in (("the runs directory", settings.TRAINHUB_RUNS_DIR), ("var/", settings.VAR_DIR)):
            if os.path.commonpath([root, os.path.realpath(inner)]) == root:
                raise ValidationError({"path": f"holds {what} ({inner}); register a folder that holds only data"})
