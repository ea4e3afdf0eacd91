from django.contrib import admin

from control_plane.accounts.models import ApiKey


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "user", "created_at", "expires_at", "revoked_at", "last_used_at"]
    list_filter = ["revoked_at", "created_at"]
    search_fields = ["name", "prefix", "user__username"]
    readonly_fields = ["prefix", "hashed_secret", "created_at", "last_used_at"]
