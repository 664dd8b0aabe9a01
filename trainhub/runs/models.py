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

    class Meta:
        db_table = "pools_gangmember"
        ordering = ["job", "attempt", "node_rank"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "worker"], name="gangmember_one_place_per_worker"),
            models.UniqueConstraint(fields=["job", "attempt", "node_rank"], name="gangmember_one_worker_per_rank"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} node {self.node_rank}: {self.worker}"
