"""OpenAPI shapes of the Messages routes' answers (gateway/server/openapi.py renders the operations;
the request bodies come from gateway.anthropic.requests' field tables)."""
from __future__ import annotations

from gateway.http.fields import object_schema

from gateway.anthropic.requests import COUNT_FIELDS, COUNT_REQUIRED, MESSAGES_FIELDS, MESSAGES_REQUIRED

_STR = {"type": "string"}
_INT = {"type": "integer"}
STOP_REASONS = ["end_turn", "max_tokens", "stop_sequence", "tool_use"]
ERROR = {"type": "object", "required": ["type", "error"], "properties": {
    "type": {"const": "error"}, "error": {"type": "object", "required": ["type", "message"], "properties": {
        "type": {"enum": ["invalid_request_error", "authentication_error", "permission_error", "not_found_error",
                          "request_too_large", "rate_limit_error", "overloaded_error", "api_error"]},
        "message": _STR}}}}
_BLOCK = {"type": "object", "required": ["type"], "properties": {
    "type": {"enum": ["text", "thinking", "tool_use"]}, "text": _STR, "thinking": _STR, "signature": _STR,
    "id": {"type": "string", "pattern": "^toolu_"}, "name": _STR, "input": {"type": "object"}}}
USAGE = {"type": "object", "required": ["input_tokens", "output_tokens"], "properties": {
    "input_tokens": _INT, "output_tokens": _INT, "cache_read_input_tokens": _INT, "cache_creation_input_tokens": _INT}}
MESSAGE = {"type": "object", "required": ["id", "type", "role", "model", "content", "stop_reason", "usage"],
           "properties": {"id": {"type": "string", "pattern": "^msg_"}, "type": {"const": "message"},
                          "role": {"const": "assistant"}, "model": _STR, "content": {"type": "array", "items": _BLOCK},
                          "stop_reason": {"enum": [*STOP_REASONS, None]}, "stop_sequence": {"type": ["string", "null"]},
                          "usage": USAGE}}
COUNT = {"type": "object", "required": ["input_tokens"], "properties": {"input_tokens": _INT}}
_EVENTS = ["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
           "message_stop", "ping", "error"]
EVENT = {"type": "object", "required": ["event", "data"], "properties": {
    "event": {"enum": _EVENTS}, "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": {
        "type": "object", "required": ["type"], "properties": {"type": {"enum": _EVENTS}}}}},
    "description": "`event:` equals the data's `type`"}


def bodies(lenient: bool) -> tuple[dict, dict]:
    """(messages body, count_tokens body) schemas, closed unless --lenient."""
    return (object_schema(MESSAGES_FIELDS, MESSAGES_REQUIRED, closed=not lenient),
            object_schema(COUNT_FIELDS, COUNT_REQUIRED, closed=not lenient))
