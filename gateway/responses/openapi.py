"""OpenAPI shapes of the Responses routes (gateway/server/openapi.py renders the operations; the
request body comes from gateway.responses.requests' field table)."""
from __future__ import annotations

from gateway.http.fields import object_schema
from gateway.responses.requests import RESPONSES_FIELDS

_STR = {"type": "string"}
_INT = {"type": "integer"}
_ITEM = {"type": "object", "required": ["type"], "properties": {
    "type": {"enum": ["message", "reasoning", "function_call"]}, "id": _STR,
    "status": {"enum": ["in_progress", "completed", "incomplete"]}, "role": {"const": "assistant"},
    "content": {"type": "array", "items": {"type": "object", "required": ["type", "text"], "properties": {
        "type": {"enum": ["output_text", "reasoning_text"]}, "text": _STR}}},
    "call_id": _STR, "name": _STR, "arguments": _STR}}
USAGE = {"type": "object", "required": ["input_tokens", "output_tokens", "total_tokens"], "properties": {
    "input_tokens": _INT, "output_tokens": _INT, "total_tokens": _INT,
    "input_tokens_details": {"type": "object", "properties": {"cached_tokens": _INT}}}}
RESPONSE = {"type": "object", "required": ["id", "object", "created_at", "status", "model", "output"], "properties": {
    "id": {"type": "string", "pattern": "^resp_"}, "object": {"const": "response"}, "created_at": _INT,
    "status": {"enum": ["completed", "incomplete", "failed", "in_progress"]}, "model": _STR,
    "output": {"type": "array", "items": _ITEM}, "usage": {"anyOf": [USAGE, {"type": "null"}]},
    "incomplete_details": {"type": ["object", "null"]}, "previous_response_id": {"type": ["string", "null"]}}}
DELETED = {"type": "object", "required": ["id", "deleted"], "properties": {
    "id": _STR, "object": {"const": "response.deleted"}, "deleted": {"const": True}}}
EVENT = {"type": "string", "description": "`event: <type>` and `data: {\"type\", \"sequence_number\", ...}`, "
                                          "sequence_number counting every event from 0; response.created first, "
                                          "response.completed / response.incomplete / response.failed last"}
RESPONSE_ID = [{"name": "response_id", "in": "path", "required": True, "schema": _STR}]


def body(lenient: bool) -> dict:
    return object_schema(RESPONSES_FIELDS, ("model", "input"), closed=not lenient)
