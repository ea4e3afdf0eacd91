from django.contrib import admin

from control_plane.registry.models import Model


@admin.register(Model)
class ModelAdmin(admin.ModelAdmin):
    list_display = ["name", "family", "architecture", "size_bytes", "random_weights", "source"]
    list_filter = ["family", "random_weights"]
    search_fields = ["name", "architecture", "source"]
