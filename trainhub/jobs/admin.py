from django.contrib import admin

from trainhub.jobs.models import Job, JobEvent


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    readonly_fields = ("old", "new", "reason", "actor", "at")
    can_delete = False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "mode", "pool", "owner", "status", "attempt", "created_at")
    list_filter = ("status", "mode", "pool")
    search_fields = ("name",)
    # Status and what the run writes change only through Job.transition and the runner (each change a
    # JobEvent); an admin edit of them would be a status change with no history. Cancel from the job page.
    readonly_fields = ("status", "attempt", "interruptions", "lease_token", "lease_expires_at", "worker",
                       "celery_task_id", "started_at", "finished_at", "exit_code", "error", "step", "total_steps",
                       "log_lines", "spec", "mode", "pool", "owner")
    inlines = [JobEventInline]
