"""GPU leases in the admin, and the pool admin's action that cancels a pool's jobs.

``pools`` is inventory and knows no jobs, so the job-cancelling action is added here, on a
subclass of its pool admin registered in its place (runs is installed after pools)."""
from django.contrib import admin, messages

from trainhub.jobs.services import pool_cancel_jobs
from trainhub.pools.admin import WorkerPoolAdmin
from trainhub.pools.models import WorkerPool
from trainhub.runs.models import GpuLease


@admin.register(GpuLease)
class GpuLeaseAdmin(admin.ModelAdmin):
    list_display = ("worker", "index", "job", "taken_at")
    list_filter = ("worker__pool",)

    def has_add_permission(self, request) -> bool:
        return False  # leases are taken by workers when they claim a job

    def has_change_permission(self, request, obj=None) -> bool:
        return False


admin.site.unregister(WorkerPool)


@admin.register(WorkerPool)
class PoolWithJobsAdmin(WorkerPoolAdmin):
    actions = [*WorkerPoolAdmin.actions, "cancel_jobs"]

    def has_cancel_jobs_permission(self, request) -> bool:
        return request.user.has_perm("jobs.change_job")

    @admin.action(description="Cancel all queued and running jobs", permissions=["change", "cancel_jobs"])
    def cancel_jobs(self, request, queryset):
        count = sum(pool_cancel_jobs(pool, actor=request.user) for pool in queryset)
        self.message_user(request, f"{count} job(s) cancelled", messages.SUCCESS)
