"""The REST schema documents the errors every operation can answer, not only its success: a
client generated from /api/schema/ (and the schemathesis run over it in the tests) then expects
the 4xx answers it will get, each a JSON object (`{"detail": ...}`, or a field -> messages map
for a refused body), or in the operation's other format where the request asked for it (CSV)."""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema

ERROR_SCHEMA = {"type": "object", "additionalProperties": True}
ALWAYS = {
    "400": "The request's parameters or body were refused.",
    "401": "No credentials, or credentials that are not valid.",
    "403": "The credentials lack the scope or the permission this operation needs.",
    "429": "A rate limit or quota was reached; Retry-After says when to come back.",
}
WITH_A_PATH_PARAMETER = {"404": "Nothing of that name or id is visible to the caller."}
WITH_A_BODY = {"413": "The request body is larger than this route accepts."}


class DocumentedErrorsSchema(AutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        errors = dict(ALWAYS)
        if "{" in self.path:
            errors.update(WITH_A_PATH_PARAMETER)
        if self.method in ("POST", "PUT", "PATCH"):
            errors.update(WITH_A_BODY)
        # DRF renders an error in the format the request negotiated (a CSV export's error is CSV)
        media_types = {"application/json"} | {media for body in responses.values() for media in body.get("content", {})}
        content = {media: {"schema": ERROR_SCHEMA} if media.endswith("json") else {} for media in sorted(media_types)}
        for status, description in errors.items():
            responses.setdefault(status, {"description": description, "content": content})
        return responses
