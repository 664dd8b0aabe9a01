from django.contrib import admin

from trainhub.notify.models import NotificationDelivery, NotifySettings


@admin.register(NotifySettings)
class NotifySettingsAdmin(admin.ModelAdmin):
    list_display = ("user", "webhook_url", "email", "events")


@admin.register(NotificationDelivery)
class NotificationDeliveryAdmin(admin.ModelAdmin):
    list_display = ("job", "channel", "target", "event", "status", "attempts", "result", "next_attempt_at",
                    "updated_at")
    list_filter = ("channel", "status")
    raw_id_fields = ("job",)
