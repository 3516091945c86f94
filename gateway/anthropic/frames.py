"""Anthropic Messages SSE events and message objects.

Every event is `event: <type>` + `data: <json with the same type>` (the anthropic client drops
events without the `event:` line). A plain text answer's deltas are framed by the native relay:
the `content_block_delta` event of block 0 is JSON-encoded once per request and split around the
text (as gateway.openai.frames does), so the lane writes `prefix + json_escaped(text) + suffix`
and Python never sees a token. The other events are rendered here with orjson.
"""
from __future__ import annotations

import uuid

import orjson

_MARK = "\x00laneserve-split\x00"  # cannot occur in an encoded event except where we put it
PING_EVENT = b'event: ping\ndata: {"type":"ping"}\n\n'  # the stream's keep-alive (clients skip it)


def event(obj: dict) -> bytes:
    return b"event: " + obj["type"].encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def text_delta_framing(index: int = 0) -> tuple[bytes, bytes]:
    """(prefix, suffix) around the JSON-escaped text of a `text_delta` of block `index`."""
    prefix, suffix = event(delta_event(index, "text_delta", "text", _MARK)).split(orjson.dumps(_MARK)[1:-1], 1)
    return prefix, suffix


def delta_event(index: int, kind: str, key: str, value: str) -> dict:
    return {"type": "content_block_delta", "index": index, "delta": {"type": kind, key: value}}


def new_message_id() -> str:
    return "msg_" + uuid.uuid4().hex[:24]


def tool_use_id(call_id: str) -> str:
    """gateway.features.tool_calls' `call_…` id as Anthropic's `toolu_…`."""
    return "toolu_" + call_id.removeprefix("call_")


def usage(prompt_tokens: int, output_tokens: int, cached_tokens: int) -> dict:
    """input_tokens + cache_read_input_tokens = the prompt's tokens (count_tokens' answer)."""
    return {"input_tokens": prompt_tokens - cached_tokens, "output_tokens": output_tokens,
            "cache_read_input_tokens": cached_tokens, "cache_creation_input_tokens": 0}


def message(message_id: str, model: str, content: list, stop_reason: str | None, stop_sequence: str | None,
            usage_: dict) -> dict:
    return {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": usage_}


def message_start(message_id: str, model: str, prompt_tokens: int) -> bytes:
    """Before any block; the cached share of the prompt is known only at the end (message_delta)."""
    return event({"type": "message_start",
                  "message": message(message_id, model, [], None, None, usage(prompt_tokens, 0, 0))})


def block_start(index: int, block: dict) -> bytes:
    return event({"type": "content_block_start", "index": index, "content_block": block})


def block_stop(index: int) -> bytes:
    return event({"type": "content_block_stop", "index": index})


def message_end(stop_reason: str, stop_sequence: str | None, usage_: dict) -> bytes:
    """message_delta (usage totals: the client overwrites message_start's) and message_stop."""
    return event({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                  "usage": usage_}) + event({"type": "message_stop"})


def error_body(kind: str, text: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": text}}
