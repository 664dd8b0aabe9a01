"""Jobs and their history. The status machine lives here and nowhere else."""
from __future__ import annotations

from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone

from trainhub.core.sql import insert_from, insert_returning, update_returning, writes_in_one_statement
from trainhub.jobs.signals import job_finished, job_finishing
from trainhub.pools.models import Worker, WorkerPool
from workers.runner.config import JobSpec, parse_spec


class IllegalTransition(Exception):
    """A status change the machine does not allow (a programming error, not a race)."""


class Status(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE = (Status.QUEUED, Status.RUNNING, Status.CANCELLING)
FINAL = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)
#: the order one owner's queued jobs are claimed in (the fair claim takes turns between owners)
QUEUE_ORDER = ("-priority", "id")

#: why a queued job waits ("job": job -> sentence) and what a submitter to a pool should know first
#: ("pool": pool -> sentence or ""); ``trainhub.runs.waiting`` fills them in when its app is ready,
#: since the claim order and the pools' state are that package's to know
#: ("jobs": a page of jobs -> {id: sentence}, in a fixed number of queries, for the job list)
WAITING = {"job": lambda job: "", "pool": lambda pool: "", "jobs": lambda jobs: {}}

#: old status -> the statuses it may move to
TRANSITIONS: dict[str, frozenset[str]] = {
    Status.QUEUED: frozenset({Status.RUNNING, Status.CANCELLED, Status.FAILED}),
    Status.RUNNING: frozenset({Status.SUCCEEDED, Status.FAILED, Status.CANCELLING, Status.QUEUED}),
    Status.CANCELLING: frozenset({Status.CANCELLED, Status.SUCCEEDED, Status.FAILED}),
    Status.SUCCEEDED: frozenset(),
    Status.FAILED: frozenset(),
    Status.CANCELLED: frozenset(),
}


class Job(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jobs")
    name = models.CharField(max_length=200)
    mode = models.CharField(max_length=20)
    spec = models.JSONField(help_text="the validated job spec")
    pool = models.ForeignKey(WorkerPool, on_delete=models.PROTECT, related_name="jobs")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    priority = models.IntegerField(default=0)
    attempt = models.PositiveIntegerField(default=1)
    interruptions = models.PositiveIntegerField(
        default=0, help_text="runs stopped through no fault of the job (its worker shut down) and put back in the "
                             "queue; they do not count against max_restarts")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    celery_task_id = models.CharField(max_length=64, blank=True)
    worker = models.ForeignKey(Worker, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs")
    # Fencing: each claim gets a new token; only the holder of the current token may write.
    lease_token = models.PositiveIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Progress as last reported by the runner.
    step = models.PositiveIntegerField(default=0)
    total_steps = models.PositiveIntegerField(default=0)
    log_lines = models.PositiveIntegerField(default=0)
    # SQLite only: the smallest and largest id of the job's stored lines (``logs.append_lines`` keeps them), so
    # its FTS5 search index, which holds every job's lines, is asked for this job's id range only
    log_first_id = models.BigIntegerField(null=True, blank=True, editable=False)
    log_last_id = models.BigIntegerField(null=True, blank=True, editable=False)
    metrics_note = models.CharField(max_length=300, blank=True,
                                    help_text="why fewer metric points are stored than the job logged (thinned past "
                                              "TRAINHUB_METRIC_MAX_POINTS), shown on its page")

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["owner", "-id"]),
            models.Index(fields=["status", "pool"]),
            # the fair claim's per-owner seeks: each queued owner's best job, by QUEUE_ORDER
            models.Index(fields=["pool", "status", "owner", "-priority", "id"], name="job_fair_claim"),
            models.Index(fields=["owner", "pool", "-started_at"], name="job_fair_served"),  # round-robin turns
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"

    @classmethod
    def submit(cls, *, owner, reason: str = "submitted", **fields) -> Job:
        """Create a job in ``queued`` with its first ``JobEvent`` (∅ → queued), both or neither: on PostgreSQL
        in one statement (one round trip, not four), elsewhere in one transaction (the caller's, if it has one:
        no savepoint; an error here fails the whole of it)."""
        job = cls(owner=owner, status=Status.QUEUED, **fields)
        event = {"old": "", "new": Status.QUEUED, "reason": reason[:2000], "actor_id": getattr(owner, "pk", None),
                 "at": timezone.now()}
        if writes_in_one_statement():
            insert, params = insert_returning(job)
            add_event, event_params = insert_from(JobEvent, "created", "job_id", event)
            with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
                cursor.execute(f"WITH created AS ({insert}) {add_event} RETURNING job_id", params + event_params)
                job.pk = cursor.fetchone()[0]
            job._state.adding, job._state.db = False, connection.alias
            return job
        with transaction.atomic(savepoint=False):
            job.save(force_insert=True)
            JobEvent.objects.create(job=job, **event)
        return job

    @property
    def spec_model(self) -> JobSpec:
        """The stored spec as the runner's typed model: the one way to read a job's spec.

        Parsed once per loaded spec (a refresh or a new spec dict parses again). Raises
        ``SpecError`` when the stored spec does not validate.
        """
        cached = self.__dict__.get("_spec_model")
        if cached is None or cached[0] is not self.spec:
            data = self.spec
            if isinstance(data, dict) and not {"mode", "workload"} & data.keys() and self.mode:
                data = {"mode": self.mode, **data}  # a spec stored without its mode: the row's column has it
            cached = (self.spec, parse_spec(data))
            self.__dict__["_spec_model"] = cached
        return cached[1]

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE

    @property
    def duration(self):
        if not self.started_at:
            return None
        return (self.finished_at or timezone.now()) - self.started_at

    def queue_position(self) -> int | None:
        """About where the job stands in its pool's queue: 1 = next to start; None when not queued.

        An estimate of the fair claim order (``trainhub.runs.fair``), which takes turns between
        owners: an owner with ``u`` running jobs and this job as their ``r``-th queued job (by
        ``QUEUE_ORDER``) is served in turn ``u + r``; every other owner's jobs in earlier turns
        come first. Exact when one user queues alone; it ignores fit (GPUs, backfill), per-user
        caps and the order within a turn, so "#3" may be a few places off with many users."""
        if self.status != Status.QUEUED:
            return None
        queued = Job.objects.filter(pool_id=self.pool_id, status=Status.QUEUED)
        ahead = models.Q(priority__gt=self.priority) | models.Q(priority=self.priority, id__lt=self.pk)
        mine = queued.filter(ahead, owner_id=self.owner_id).count() + 1
        running = dict(Job.objects.filter(pool_id=self.pool_id, status__in=(Status.RUNNING, Status.CANCELLING))
                       .values_list("owner_id").order_by().annotate(n=models.Count("id")))
        turn = running.get(self.owner_id, 0) + mine
        others = (queued.exclude(owner_id=self.owner_id).values_list("owner_id").order_by()
                  .annotate(n=models.Count("id")))
        return mine + sum(min(n, max(0, turn - 1 - running.get(owner, 0))) for owner, n in others)

    @property
    def waiting_reason(self) -> str:
        """Why this job is still queued, or claimed but held by its backend (Slurm keeps it
        pending), as one sentence; "" otherwise."""
        return WAITING["job"](self) if self.status in (Status.QUEUED, Status.RUNNING) else ""

    @property
    def slurm_waiting(self) -> str:
        """Slurm's bare reason while it holds this job pending (``trainhub.jobs.slurm_wait``), else ""
        (the API's ``slurm_pending_reason``; pages show ``waiting_reason``, which says it whole)."""
        from trainhub.jobs.slurm_wait import slurm_wait_reason

        return slurm_wait_reason(self)

    @property
    def slurm_queue_position(self) -> int | None:
        """While Slurm holds this job pending: its place in the partition's queue (1 = next)."""
        from trainhub.jobs.slurm_wait import slurm_queue_position

        return slurm_queue_position(self)

    @property
    def progress(self) -> float | None:
        if not self.total_steps:
            return None
        return min(1.0, self.step / self.total_steps)

    def transition(self, new: str, *, reason: str = "", actor=None, expect: str | None = None,
                   only_if: dict | None = None, **fields) -> bool:
        """Move from ``expect`` (default: the status this instance holds) to ``new``.

        A compare-and-set on the row: returns False, changing nothing, when the row is no
        longer in the expected status (someone else moved it first). Every successful
        transition writes a ``JobEvent``. ``only_if`` adds conditions on the row to the compare (a claim
        names the attempt it claims). ``fields`` are updated in the same statement. A final
        status sends ``signals.job_finishing`` inside the transaction and ``signals.job_finished``
        once it commits.
        """
        old = expect or self.status
        if new not in TRANSITIONS.get(old, ()):
            raise IllegalTransition(f"job {self.pk}: {old} -> {new} is not allowed")
        now = timezone.now()
        if new == Status.RUNNING:
            fields.setdefault("started_at", now)
        if new in FINAL:
            fields.setdefault("finished_at", now)
            fields.setdefault("lease_expires_at", None)
        row = Job.objects.filter(pk=self.pk, status=old, **(only_if or {}))
        event = {"old": old, "new": new, "reason": reason[:2000], "actor_id": getattr(actor, "pk", None), "at": now}
        if new not in FINAL and writes_in_one_statement():  # a final status has more to write: the transaction
            won = _update_with_event(row, {"status": new, **fields}, event)
        else:
            with transaction.atomic():
                won = row.update(status=new, **fields)
                if won:
                    JobEvent.objects.create(job_id=self.pk, **event)
                if won and new in FINAL:  # on commit: a rolled-back final status tells nobody
                    job_finishing.send(sender=Job, job_id=self.pk)  # same transaction: outbox rows
                    transaction.on_commit(lambda: job_finished.send(sender=Job, job=self))
        if not won:
            self.refresh_from_db()
            return False
        self.status = new
        for key, value in fields.items():
            setattr(self, key, value)
        return True


def _update_with_event(row: models.QuerySet, values: dict, event: dict) -> int:
    """``row.update(**values)`` and, if it changed the row, its ``JobEvent`` (``event``'s fields), as one
    statement: one round trip where a transaction takes four (PostgreSQL only: ``writes_in_one_statement``)."""
    update, params = update_returning(row, values)
    add_event, event_params = insert_from(JobEvent, "moved", "job_id", event)
    with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
        cursor.execute(f"WITH moved AS ({update}) {add_event}", params + event_params)
        return cursor.rowcount


class JobEvent(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    old = models.CharField(max_length=12, blank=True)
    new = models.CharField(max_length=12)
    reason = models.TextField(blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.old or '∅'} → {self.new}"


class LogLine(models.Model):
    """One line of one rank's output. ``seq`` is gap-free per job and unique."""

    # no index of its own: ``logline_job_seq`` (job, seq) serves every lookup by job, and a second index
    # cost each stored line another B-tree insert
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+", db_index=False)
    seq = models.PositiveBigIntegerField()
    rank = models.SmallIntegerField(default=0)
    stream = models.CharField(max_length=1, default="o", help_text="o = stdout, e = stderr, s = system")
    text = models.TextField()
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "seq"], name="logline_job_seq")]


class LogChunk(models.Model):
    """PostgreSQL's log search index: the text of up to ``CHUNK_LINES`` lines of one job in one row, upper-cased,
    under a pg_trgm GIN index. Search asks it for the chunks that hold a query, then checks the lines of those
    seq ranges; a trigram index over every line capped storing at ~48,000 lines/s (docs/BENCHMARKS.md).

    Written by the database itself (a statement trigger on ``jobs_logline``'s inserts and updates, migration
    jobs/0009), so no path that writes lines can leave them out. A chunk may outlive a line it holds (a line
    changed or deleted): search checks the lines, so a stale chunk costs a look, never a wrong match. Empty on
    SQLite, whose index is FTS5 (jobs/0006)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+", db_index=False)
    first_seq = models.PositiveBigIntegerField()
    last_seq = models.PositiveBigIntegerField()
    text = models.TextField()

    class Meta:
        # a job's chunks in seq order: search looks at the first few of them before it asks the trigram
        # index (``logs._chunk_lines``), and retention deletes a seq range of them
        indexes = [models.Index(fields=["job", "first_seq"], name="logchunk_job_first_seq")]


class Metric(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    step = models.PositiveIntegerField()
    name = models.CharField(max_length=100)
    value = models.FloatField()
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        # the unique constraint's index serves every lookup by job (and name, step); a second index on the same
        # columns only doubled the cost of storing a point (removed in jobs/0012)
        constraints = [models.UniqueConstraint(fields=["job", "name", "step"], name="metric_job_name_step")]


class JobTemplate(models.Model):
    """A named, validated spec a user can start new jobs from (in the form, the API or the CLI)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="job_templates")
    name = models.CharField(max_length=100)
    description = models.CharField(max_length=300, blank=True)
    spec = models.JSONField(help_text="the validated job spec")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="jobtemplate_owner_name")]

    def __str__(self) -> str:
        return self.name
