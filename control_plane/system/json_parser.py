"""The REST API's JSON parser: DRF's, with the body's values checked (json_bounds.py), so a
lone surrogate or a 2**80 is a 400 instead of a database error."""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from control_plane.system.json_bounds import HostileJson, check_json_values


class CheckedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None
        try:
            check_json_values(data)
        except HostileJson as error:
            raise ParseError(error.message) from None
        return data
