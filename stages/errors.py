"""Errors a stage raises for one request. None of them may take the stage down."""

from __future__ import annotations


class StageFailure(Exception):
    """A request failed inside a stage; other requests keep going."""

    error_type = "server_error"

    def __init__(self, message: str, *, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidRequest(StageFailure):
    """Bad input for one request. `param` names the offending field."""

    error_type = "invalid_request_error"

    def __init__(self, param: str | None, message: str):
        text = f"{param}: {message}" if param else message
        super().__init__(text, param=param)
        self.reason = message
        """What is wrong, without the field's name."""


class ConfigError(ValueError):
    """A pipeline or deploy configuration is invalid. `field` is a dotted path."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
