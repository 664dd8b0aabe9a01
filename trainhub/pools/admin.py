"""Pools in the admin. Every edit is recorded (the admin's history: who, what, when) and
takes effect on live workers at their next claim — no restart."""
from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html

from trainhub.pools.models import DataRoot, Worker, WorkerPool, Workspace
from trainhub.pools.services import pool_set_state


class WorkerInline(admin.TabularInline):
    model = Worker
    extra = 0
    fields = ("hostname", "last_heartbeat", "online", "gpu_count", "threads")
    readonly_fields = fields
    can_delete = True

    @admin.display(boolean=True)
    def online(self, obj: Worker) -> bool:
        return obj.online

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(WorkerPool)
class WorkerPoolAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "queue", "state", "slots_per_worker", "gpus_per_worker", "page")
    list_filter = ("kind", "state")
    filter_horizontal = ("groups",)
    inlines = [WorkerInline]
    actions = ["drain", "disable", "enable"]  # trainhub.runs.admin adds "cancel_jobs"
    fieldsets = [
        (None, {"fields": ("name", "kind", "queue", "state", "description")}),
        ("Capacity", {"fields": ("slots_per_worker", "gpus_per_worker", "modes")}),
        ("Slurm (kind slurm)", {"fields": ("partition", "account", "qos", "slurm_conf", "slurm_accounts"),
                                "classes": ("collapse",)}),
        ("Isolation", {"fields": ("sandbox", "sandbox_network")}),
        ("Who and how", {"fields": ("groups", "default_priority", "max_priority",
                                    "default_timeout_minutes", "log_retention_lines")}),
        ("Per-user limits (0 = none; staff may exceed)", {"fields": (
            "max_running_per_user", "max_gpus_per_user", "max_queued_per_user", "max_timeout_minutes",
            "max_restarts_limit")}),
    ]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        short = [w.hostname for w in obj.workers.all() if w.online and w.threads < obj.slots_per_worker]
        if short:
            self.message_user(request, f"{', '.join(short)} can run fewer than {obj.slots_per_worker} jobs at once "
                                       "(started with a smaller --slots); restart them with --slots "
                                       f"{obj.slots_per_worker} or more to use every slot", messages.WARNING)

    @admin.display(description="pool page")
    def page(self, obj: WorkerPool) -> str:
        return format_html('<a href="{}">open</a>', reverse("pool_detail", args=[obj.name]))

    def _set_state(self, request, queryset, state):
        changed = sum(pool_set_state(pool, state, actor=request.user) for pool in queryset)
        self.message_user(request, f"{changed} pool(s) now {state}", messages.SUCCESS)

    @admin.action(description="Drain: running jobs finish, no new ones start", permissions=["change"])
    def drain(self, request, queryset):
        self._set_state(request, queryset, WorkerPool.State.DRAINING)

    @admin.action(description="Disable: refuse new submissions", permissions=["change"])
    def disable(self, request, queryset):
        self._set_state(request, queryset, WorkerPool.State.DISABLED)

    @admin.action(description="Enable", permissions=["change"])
    def enable(self, request, queryset):
        self._set_state(request, queryset, WorkerPool.State.ENABLED)


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ("hostname", "pool", "last_heartbeat", "is_online", "gpu_count", "threads")
    list_filter = ("pool",)
    readonly_fields = ("started_at", "last_heartbeat", "info", "gpu_count", "threads")

    @admin.display(boolean=True, description="online")
    def is_online(self, obj: Worker) -> bool:
        return obj.online


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("name", "path")


@admin.register(DataRoot)
class DataRootAdmin(admin.ModelAdmin):
    """Where jobs' data, model and tokenizer paths may point (read-only in the job's sandbox)."""

    list_display = ("name", "path", "description")
    filter_horizontal = ("groups",)
