"""What running jobs hold: GPU leases and places in a multi-node gang.

The tables keep their old names (``pools_*``): the models moved here from ``pools``
without a data migration.
"""
from django.db import models
from django.utils import timezone

from trainhub.pools.models import Worker


class GpuLease(models.Model):
    """One GPU of one worker held by one job. The unique constraint makes sharing impossible."""

    worker = models.ForeignKey(Worker, on_delete=models.CASCADE, related_name="gpu_leases")
    index = models.PositiveSmallIntegerField()
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="gpu_leases")
    lease_token = models.PositiveIntegerField(help_text="the job's lease token when taken")
    taken_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "pools_gpulease"
        ordering = ["worker", "index"]
        constraints = [models.UniqueConstraint(fields=["worker", "index"], name="gpulease_worker_index")]

    def __str__(self) -> str:
        return f"{self.worker} GPU {self.index} → job {self.job_id}"


class GangMember(models.Model):
    """One worker's place in a multi-node job's gang, for one attempt.

    Workers join while the job is still queued, each holding a slot and its GPU leases; the
    job starts only when all ``nodes`` have joined (all or nothing), else it fails after the
    gang timeout and every member lets go."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="gang_members")
    attempt = models.PositiveIntegerField()
    worker = models.ForeignKey(Worker, on_delete=models.CASCADE, related_name="gang_members")
    node_rank = models.PositiveSmallIntegerField()
    address = models.CharField(max_length=300, blank=True, help_text="rank 0: the c10d rendezvous host:port")
    lighthouse = models.CharField(max_length=300, blank=True,
                                  help_text="cross-site job, place 0: the torchft lighthouse's http://host:port")
    lease_token = models.PositiveIntegerField(help_text="the job's lease token once the gang starts")
    joined_at = models.DateTimeField(default=timezone.now)
    done = models.BooleanField(default=False, help_text="this member's thread has let go (slot free)")
    # cross-site job: what its site's node is doing (written by the worker, shown on the job page)
    site_state = models.CharField(max_length=20, blank=True, choices=[
        ("running", "running"), ("lost", "lost"), ("failed", "failed for good"), ("finished", "finished")])
    restarts = models.PositiveSmallIntegerField(default=0, help_text="cross-site job: the site's restarts used")
    restart_at = models.DateTimeField(null=True, blank=True, help_text="cross-site job: a lost site starts again then")
    metric_mark = models.PositiveBigIntegerField(
        default=0, help_text="cross-site job: the job's newest metric id when the site restarted (a sync after it: healed)")

    class Meta:
        db_table = "pools_gangmember"
        ordering = ["job", "attempt", "node_rank"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "worker"], name="gangmember_one_place_per_worker"),
            models.UniqueConstraint(fields=["job", "attempt", "node_rank"], name="gangmember_one_worker_per_rank"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} node {self.node_rank}: {self.worker}"


class SlurmRun(models.Model):
    """The Slurm batch job of a Slurm pool's job, for its current attempt: what a restarted
    worker needs to follow it again (``trainhub.runs.slurm_adopt``), and what Slurm says about it
    for the pages (its pending reason, its nodes). One row per job, rewritten by each attempt."""

    job = models.OneToOneField("jobs.Job", on_delete=models.CASCADE, related_name="slurm_run")
    attempt = models.PositiveIntegerField()
    slurm_job_id = models.CharField(max_length=32, help_text="sbatch's job id")
    stream_token = models.PositiveIntegerField(help_text="the lease token the nodes send their lines under")
    nodes = models.PositiveSmallIntegerField(default=1)
    # Per node, how many of its lines the job's log holds, written before the lines it counts are
    # stored: ``cursor`` holds once the log reaches ``cursor_seq`` lines, else ``prev_cursor`` does.
    cursor = models.JSONField(default=dict, blank=True, help_text="per node: lines taken up to log line cursor_seq")
    cursor_seq = models.PositiveBigIntegerField(default=0)
    prev_cursor = models.JSONField(default=dict, blank=True, help_text="per node: lines surely in the log")
    state = models.CharField(max_length=24, blank=True, help_text="Slurm's JobState, e.g. PENDING, RUNNING")
    pending_reason = models.CharField(max_length=100, blank=True,
                                      help_text="Slurm's Reason while the job is pending (Priority, Resources, QOS…)")
    pending_position = models.PositiveIntegerField(
        null=True, blank=True, help_text="while pending: its place among the partition's pending jobs (1 = next)")
    nodelist = models.CharField(max_length=300, blank=True, help_text="the allocation's nodes, e.g. n1,n2")
    updated_at = models.DateTimeField(default=timezone.now)

    def stored_cursor(self, log_lines: int) -> dict:
        """Per node, how many of its lines are in the job's log, which holds ``log_lines`` lines:
        where a restarted worker resumes reading them (none lost, none stored twice)."""
        return self.cursor if log_lines >= self.cursor_seq else self.prev_cursor

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt}: slurm job {self.slurm_job_id}"
