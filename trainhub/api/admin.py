from django.contrib import admin

from trainhub.api.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("user", "name", "hint", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("digest", "hint", "created_at", "last_used_at")
