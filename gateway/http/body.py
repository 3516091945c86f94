"""Strict request-body parsing.

orjson rejects what Sanic's default ujson lets through and would crash us downstream: NaN,
Infinity, 1e999, lone surrogates, invalid UTF-8. We add a Content-Type check,
an empty-body check, a BOM check with a clear message, and a nesting limit far below orjson's 1024
so a hostile body cannot make validation walk deep structures. The size limit itself is enforced
by Sanic (REQUEST_MAX_SIZE → 413) before the body is buffered.
"""
from __future__ import annotations

import orjson

from gateway.http.errors import APIError, invalid, safe_repr

_JSON_TYPES = ("application/json",)


def check_content_type(content_type: str | None) -> None:
    """Accept a missing type, application/json and */*+json; charset, if given, must be UTF-8."""
    if not content_type:
        return
    main, *params = [part.strip().lower() for part in content_type.split(";")]
    if main not in _JSON_TYPES and not main.endswith("+json"):
        raise APIError(
            415,
            "Content-Type must be application/json",
            code="unsupported_media_type",
        )
    for param in params:
        key, _, value = param.partition("=")
        if key.strip() == "charset" and value.strip().strip('"') not in ("utf-8", "utf8"):
            raise APIError(415, "request bodies must be UTF-8 JSON", code="unsupported_media_type")


def _depth_exceeds(value: object, max_depth: int) -> bool:
    # Iterative: a recursive walk is what a nesting attack targets.
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))
    return False


def parse_json_object(body: bytes, content_type: str | None, max_depth: int, *, top_level: type = dict) -> dict:
    """`top_level`: list for the few routes whose body is an array (llama-server's POST /lora-adapters)."""
    what = "a JSON object" if top_level is dict else "a JSON array"
    check_content_type(content_type)
    if not body or not body.strip():
        raise invalid(f"request body is empty; expected {what}", code="invalid_json")
    if body.startswith(b"\xef\xbb\xbf"):
        raise invalid("request body starts with a byte-order mark; send plain UTF-8 JSON", code="invalid_json")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        # orjson's message names the problem and position, never the offending bytes.
        raise invalid(f"request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(value, top_level):
        raise invalid(f"request body must be {what}", code="invalid_json")
    if _depth_exceeds(value, max_depth):
        raise invalid(f"request body nests deeper than {max_depth} levels", code="invalid_json")
    return value


def parse_known_fields(request, config, known: dict) -> dict:
    """A small JSON object body whose fields must be in `known` (unknown → 400 unless --lenient)."""
    body = parse_json_object(request.body, request.headers.get("content-type"), config.max_json_depth)
    unknown = sorted(k for k in body if k not in known)
    if unknown and not config.lenient:
        raise invalid(f"Unrecognized request argument supplied: {safe_repr(unknown[0])}",
                      param=safe_repr(unknown[0]).strip("'"), code="unknown_parameter")
    return body
