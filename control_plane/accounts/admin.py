"""Django admin for accounts: users (with their keys, quotas and a link to their usage),
API keys (the secret is shown once, on the page after "Save"), quotas and usage."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.db.models import Q
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from control_plane.accounts.forms import ThrottledAdminAuthenticationForm
from control_plane.accounts.models import ApiKey, Quota, UsageRecord
from control_plane.accounts.services import DEFAULT_SCOPES, api_key_create, api_key_revoke, api_key_validate
from control_plane.audit.admin_mixin import AuditedAdminMixin
from control_plane.audit.models import Action
from control_plane.audit.services import audit_record

User = get_user_model()

admin.site.login_form = ThrottledAdminAuthenticationForm


class ApiKeyStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request, model_admin):
        return [("active", "active"), ("expired", "expired"), ("revoked", "revoked")]

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == "active":
            return queryset.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now), revoked_at__isnull=True)
        if self.value() == "expired":
            return queryset.filter(expires_at__lte=now, revoked_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


class ApiKeyAdminForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=ApiKey.Scope.choices, widget=forms.CheckboxSelectMultiple, initial=DEFAULT_SCOPES
    )
    allowed_deployments = forms.CharField(
        required=False, help_text="Comma-separated deployment names this key may use; empty: every deployment."
    )

    class Meta:
        model = ApiKey
        fields = ["user", "name", "scopes", "allowed_deployments", "expires_at"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["allowed_deployments"] = ", ".join(self.instance.allowed_deployments)

    def clean_allowed_deployments(self) -> list[str]:
        names = [name.strip() for name in self.cleaned_data["allowed_deployments"].split(",")]
        return list(dict.fromkeys(name for name in names if name))

    def clean(self):
        data = super().clean()
        user = data.get("user") or getattr(self.instance, "user", None)
        if user is not None and "scopes" in data and "allowed_deployments" in data:
            try:
                api_key_validate(
                    user=user,
                    name=data.get("name", ""),
                    scopes=data["scopes"],
                    expires_at=data.get("expires_at"),
                    allowed_deployments=data["allowed_deployments"],
                    new=self.instance.pk is None,
                )
            except ValidationError as error:
                for field, problems in error.message_dict.items():
                    self.add_error(field if field in self.fields else None, problems)
        return data


@admin.register(ApiKey)
class ApiKeyAdmin(AuditedAdminMixin, admin.ModelAdmin):
    form = ApiKeyAdminForm
    list_display = ["name", "prefix", "user", "scope_list", "status", "created_at", "expires_at", "last_used_at"]
    list_filter = [ApiKeyStatusFilter, "created_at", "expires_at"]
    search_fields = ["name", "prefix", "user__username", "user__email"]
    list_select_related = ["user"]
    autocomplete_fields = ["user"]
    actions = ["revoke_keys"]
    created_template = "admin/accounts/apikey/created.html"

    def get_fields(self, request, obj=None):
        editable = ["name", "scopes", "allowed_deployments", "expires_at"]
        if obj is None:
            return ["user", *editable]
        return ["user", "prefix", *editable, "created_at", "last_used_at", "revoked_at", "status"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return ["user", "prefix", "created_at", "last_used_at", "revoked_at", "status"]

    @admin.display(description="scopes")
    def scope_list(self, key: ApiKey) -> str:
        return ", ".join(key.scopes)

    @admin.display(description="status")
    def status(self, key: ApiKey) -> str:
        if key.revoked_at is not None:
            return "revoked"
        return "active" if key.is_active else "expired"

    def save_model(self, request, obj: ApiKey, form, change: bool) -> None:
        if change:
            obj.save()
            return
        key, secret = api_key_create(
            user=obj.user,
            name=obj.name,
            scopes=obj.scopes,
            expires_at=obj.expires_at,
            allowed_deployments=obj.allowed_deployments,
        )
        obj.pk, obj.prefix, obj.hashed_secret, obj.created_at = key.pk, key.prefix, key.hashed_secret, key.created_at
        obj._state.adding = False
        obj._created_secret = secret  # read once by response_add, never stored

    def response_add(self, request, obj: ApiKey, post_url_continue=None):
        """The secret goes straight into this response (not into messages, which could be
        stored in the session table), with no-store so no cache keeps it."""
        secret = obj.__dict__.pop("_created_secret", None)
        if secret is None:
            return super().response_add(request, obj, post_url_continue)
        context = {**self.admin_site.each_context(request), "opts": self.opts, "key": obj, "secret": secret}
        context["title"] = "API key created"
        response = TemplateResponse(request, self.created_template, context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke the selected API keys")
    def revoke_keys(self, request, queryset) -> None:
        revoked = 0
        for key in queryset.filter(revoked_at__isnull=True):
            audit_record(request, Action.API_KEY_REVOKE, api_key_revoke(key=key))
            revoked += 1
        self.message_user(request, f"Revoked {revoked} API key(s).", messages.SUCCESS)


@admin.register(Quota)
class QuotaAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = ["__str__", "user", "api_key", "metric", "window", "limit", "is_active"]
    list_editable = ["limit", "is_active"]
    list_filter = ["metric", "window", "is_active", ("user", admin.EmptyFieldListFilter)]
    search_fields = ["user__username", "api_key__prefix", "api_key__name"]
    list_select_related = ["user", "api_key"]
    autocomplete_fields = ["user", "api_key"]
    fieldsets = [
        (None, {"fields": ["metric", "window", "limit", "is_active"]}),
        ("Applies to", {"fields": ["user", "api_key"], "description": "A user, a key, or neither: every user."}),
    ]


@admin.register(UsageRecord)
class UsageRecordAdmin(admin.ModelAdmin):
    list_display = [
        "request_id",
        "created_at",
        "user",
        "api_key",
        "deployment",
        "modality",
        "text_tokens_in",
        "text_tokens_out",
        "audio_seconds_in",
        "audio_seconds_out",
        "images",
        "video_seconds",
        "realtime_minutes",
    ]
    list_filter = ["modality", "created_at", "deployment"]
    search_fields = ["request_id", "user__username", "api_key__prefix", "api_key__name", "deployment"]
    date_hierarchy = "created_at"
    list_select_related = ["user", "api_key"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    fields = ["name", "prefix", "scopes", "expires_at", "revoked_at", "last_used_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # keys are added through the API key page, which shows the secret once


class QuotaInline(admin.TabularInline):
    model = Quota
    fk_name = "user"
    fields = ["metric", "window", "limit", "is_active"]
    extra = 0


admin.site.unregister(User)


@admin.register(User)
class AccountUserAdmin(AuditedAdminMixin, UserAdmin):
    inlines = [QuotaInline, ApiKeyInline]
    readonly_fields = [*UserAdmin.readonly_fields, "usage_and_keys"]
    fieldsets = [*UserAdmin.fieldsets, ("Omnistage", {"fields": ["usage_and_keys"]})]

    def get_inline_instances(self, request, obj=None):
        return super().get_inline_instances(request, obj) if obj is not None else []  # the add form stays Django's

    def add_view(self, request, form_url="", extra_context=None):
        """Two admins adding the same username at once both pass the form's uniqueness check and
        one insert fails: answer that one as the form does (the username is taken), not with a 500."""
        try:
            return super().add_view(request, form_url, extra_context)
        except IntegrityError:
            if request.method != "POST" or not User.objects.filter(username=request.POST.get("username")).exists():
                raise
            return super().add_view(request, form_url, extra_context)  # the form now sees the username taken

    @admin.display(description="usage and keys")
    def usage_and_keys(self, user) -> str:
        if not user.pk:
            return "-"
        usage = reverse("admin:accounts_usagerecord_changelist") + f"?user__id__exact={user.pk}"
        new_key = reverse("admin:accounts_apikey_add") + f"?user={user.pk}"
        return format_html('<a href="{}">View usage</a> · <a href="{}">Create an API key</a>', usage, new_key)
