"""Anthropic's error shape — `{"type": "error", "error": {"type", "message"}}` — for the Messages
routes, whoever raised the error: the adapter (bad body, unknown model, queue full, draining), the
API key check (gateway.http.auth) and Sanic itself (body too large; gateway.http.error_handler)."""
from __future__ import annotations

import orjson
from sanic.response import HTTPResponse

from gateway.anthropic.frames import error_body, event
from gateway.http.errors import APIError
from gateway.http.request_ids import HEADER as REQUEST_ID_HEADER

PATH_PREFIX = "/v1/messages"  # the Messages routes: /v1/messages and /v1/messages/count_tokens
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
          529: "overloaded_error"}


def is_messages_path(path: str) -> bool:
    return path == PATH_PREFIX or path.startswith(PATH_PREFIX + "/")


def error_type(error: APIError) -> str:
    """Anthropic's type for the error's status: other 4xx are invalid requests, other 5xx api_error."""
    return _TYPES.get(error.status) or ("invalid_request_error" if error.status < 500 else "api_error")


def body(error: APIError) -> bytes:
    return orjson.dumps(error_body(error_type(error), error.message))


def error_event(error: APIError) -> bytes:
    """A failure after the stream started: `event: error` with the same body."""
    return event(error_body(error_type(error), error.message))


def error_response(request_id: str, error: APIError) -> HTTPResponse:
    """The error's status and headers (Retry-After on 429/503), Anthropic's body."""
    return HTTPResponse(body(error), status=error.status, headers={REQUEST_ID_HEADER: request_id, **error.headers},
                        content_type="application/json")
