"""API errors, and how each API spells them: the same failure has an OpenAI and an Anthropic body."""

from __future__ import annotations

from typing import Any

_OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error",
                 405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
                 500: "server_error", 503: "server_error"}
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                    405: "invalid_request_error", 413: "request_too_large", 429: "rate_limit_error",
                    500: "api_error", 503: "overloaded_error"}


class APIError(Exception):
    """A request that fails with an HTTP status and a message the client shows as-is."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.retry_after = retry_after
        self.counted = False  # already in the server's failure count

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


def openai_error_body(err: APIError) -> dict[str, Any]:
    return {"error": {"message": err.message, "type": _OPENAI_TYPES.get(err.status, "server_error"),
                      "param": err.param, "code": err.code}}


def anthropic_error_body(err: APIError) -> dict[str, Any]:
    return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(err.status, "api_error"), "message": err.message}}
