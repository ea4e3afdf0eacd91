from datetime import timedelta

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import Http404
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from console.access import signed_in, user_is_admin
from console.key_form import KeyForm
from console.pages import render_page
from control_plane.accounts.models import ApiKey
from control_plane.accounts.queries import api_key_get, api_key_list, quota_status, usage_records, usage_summary
from control_plane.accounts.services import api_key_create, api_key_revoke
from control_plane.audit.models import Action
from control_plane.audit.services import audit_record
from control_plane.deployments.queries import deployment_list

USAGE_DAYS = 14


def _scope_choices(user) -> list:
    return [(value, label) for value, label in ApiKey.Scope.choices if value != ApiKey.Scope.ADMIN or user.is_staff]


@signed_in
@transaction.atomic
def keys(request):
    errors: dict = {}
    form = KeyForm.blank()
    created_secret = None
    if request.method == "POST":
        form = KeyForm.from_post(request.POST)
        try:
            key, created_secret = api_key_create(user=request.user, **form.create_arguments())
        except ValidationError as error:
            errors = {field: " ".join(messages_) for field, messages_ in error.message_dict.items()}
        else:
            audit_record(request, Action.API_KEY_CREATE, key)
            messages.success(request, f"Created key “{key.name}”. Copy the secret now: it is not shown again.")
            form = KeyForm.blank()
    context = {
        "keys": api_key_list(user=request.user),
        "form": form,
        "errors": errors,
        "scope_choices": _scope_choices(request.user),
        "created_secret": created_secret,
        "deployment_names": list(deployment_list().order_by("name").values_list("name", flat=True)),
    }
    response = render_page(request, "console/keys.html", context, active="keys", status=400 if errors else 200)
    response["Cache-Control"] = "no-store"  # the page may carry a secret
    return response


@require_POST
@signed_in
@transaction.atomic
def key_revoke(request, key_id: int):
    key = api_key_get(user=request.user, key_id=key_id)
    if key is None:
        raise Http404("no such key")
    audit_record(request, Action.API_KEY_REVOKE, api_key_revoke(key=key))
    messages.success(request, f"Revoked key “{key.name}”.")
    return redirect("console:keys")


@signed_in
def usage(request):
    end = timezone.now()
    start = (end - timedelta(days=USAGE_DAYS - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    everyone = user_is_admin(request.user) and request.GET.get("scope") == "all"
    records = usage_records(start=start, end=end, user=None if everyone else request.user)
    by_day, totals = usage_summary(records, ["day"])
    by_deployment, _ = usage_summary(records, ["deployment"])
    try:
        quotas = quota_status(user=request.user)
        quota_error = None
    except Exception as error:  # Redis down: show the page without quotas
        quotas, quota_error = [], str(error)
    context = {
        "days": _day_bars(by_day, start, USAGE_DAYS),
        "totals": totals,
        "by_deployment": by_deployment,
        "quotas": [_quota_row(q) for q in quotas],
        "quota_error": quota_error,
        "everyone": everyone,
    }
    return render_page(request, "console/usage.html", context, active="usage")


def _day_bars(rows: list[dict], start, days: int) -> list[dict]:
    by_day = {row["day"]: row for row in rows}
    peak = max((row["requests"] for row in rows), default=0) or 1
    bars = []
    for offset in range(days):
        day = (start + timedelta(days=offset)).date()
        row = by_day.get(day, {})
        requests = row.get("requests", 0)
        height = round(80 * requests / peak, 1)
        bars.append({"day": day, "requests": requests, "tokens": row.get("text_tokens_out", 0),
                     "x": offset * 22, "h": height, "y": round(86 - height, 1)})  # fmt: skip
    return bars


def _quota_row(status) -> dict:
    limit = status.limit
    used_pct = min(100, round(100 * status.used / limit.limit)) if limit.limit else 100
    return {"metric": limit.metric, "window": limit.window, "limit": limit.limit, "used": status.used,
            "remaining": status.remaining, "used_pct": used_pct, "reset_s": round(status.reset_s)}  # fmt: skip
