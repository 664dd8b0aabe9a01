from django.contrib import admin

from trainhub.pools.models import Worker, WorkerPool, Workspace


class WorkerInline(admin.TabularInline):
    model = Worker
    extra = 0
    fields = ("hostname", "last_heartbeat", "online")
    readonly_fields = ("hostname", "last_heartbeat", "online")

    @admin.display(boolean=True)
    def online(self, obj: Worker) -> bool:
        return obj.online


@admin.register(WorkerPool)
class WorkerPoolAdmin(admin.ModelAdmin):
    list_display = ("name", "kind", "queue", "enabled")
    list_filter = ("kind", "enabled")
    inlines = [WorkerInline]


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ("hostname", "pool", "last_heartbeat", "is_online")
    list_filter = ("pool",)
    readonly_fields = ("started_at", "last_heartbeat", "info")

    @admin.display(boolean=True, description="online")
    def is_online(self, obj: Worker) -> bool:
        return obj.online


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("name", "path")
