"""Stored responses: the history rows of /v1/responses (route `responses`), read back by
`GET /v1/responses/{id}`, deleted by `DELETE`, and continued by `previous_response_id`.

A row keeps its conversation (`inputs.conversation`: the earlier turns and this input, media
summarised) and its answer (`output_text`), so the next response starts from both. A response
created with `store: false` is recorded like every request, but cannot be read back or continued.
A caller sees their own responses (an API key limited to some deployments: those deployments').
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from control_plane.accounts.permissions import deployment_allow_list
from control_plane.inference.errors import ApiError
from control_plane.inference.models import InferenceRequest, Route, Status
from control_plane.inference.queries import visible_requests
from control_plane.inference.targets import Caller
from control_plane.openai_compat.response_inputs import text_only


def stored_responses(caller: Caller):
    rows = visible_requests(viewer=caller.user, see_all=False, deployments=deployment_allow_list(caller.api_key))
    return rows.filter(route=Route.RESPONSES, deleted_at__isnull=True).exclude(parameters__store=False)


def stored_response(caller: Caller, response_id: str) -> InferenceRequest:
    row = stored_responses(caller).filter(request_id=response_id).prefetch_related("artifacts").first()
    if row is None:
        raise ApiError(404, f"No response with id '{response_id}' found.", param="response_id",
                       code="response_not_found")  # fmt: skip
    return row


def earlier_turns(caller: Caller, response_id: str) -> list[dict[str, Any]]:
    """The conversation a new response continues: the previous one's turns, then its answer."""
    row = stored_responses(caller).filter(request_id=response_id).first()
    if row is None:
        raise ApiError(400, f"Previous response with id '{response_id}' not found.", param="previous_response_id",
                       code="previous_response_not_found")  # fmt: skip
    if row.status != Status.COMPLETED:
        raise ApiError(400, f"Previous response '{response_id}' is {row.status}; only a completed response can be "
                       "continued.", param="previous_response_id", code="previous_response_not_completed")  # fmt: skip
    turns = text_only(row.inputs.get("conversation") or [])
    return [*turns, {"role": "assistant", "content": row.output_text}]


def delete_response(row: InferenceRequest) -> None:
    """Hidden from the API (the history keeps the row); its files are removed."""
    row.deleted_at = timezone.now()
    row.save(update_fields=["deleted_at"])
    for artifact in row.artifacts.all():
        artifact.file.delete(save=False)
        artifact.delete()
