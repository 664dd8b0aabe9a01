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
    readonly_fields = ("status", "attempt", "lease_token", "lease_expires_at", "worker", "celery_task_id")
    inlines = [JobEventInline]
