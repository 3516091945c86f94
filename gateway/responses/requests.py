"""Validation of POST /v1/responses bodies into a frozen request (strict: unknown field → 400).

The sampling fields and their bounds are the OpenAI chat ones (gateway.openai.requests); the
conversation is read by gateway.responses.conversation; tools come in the flat Responses shape.
"""
from __future__ import annotations

from dataclasses import dataclass

from gateway.features.reasoning import EFFORTS, effort_kwargs, think_from_openai
from gateway.features.structured import SCHEMA_SHAPES, from_text_format
from gateway.features.tools import TOOL_CHOICES, Tools, parse_tools
from gateway.http.errors import invalid
from gateway.http.fields import Bool, Custom, Int, NoOp, Obj, Str, get_object, table
from gateway.http.limits import MAX_TOKENS_LIMIT
from gateway.openai.requests import COMMON_FIELDS, Sampling, check_fields
from gateway.responses.conversation import INPUT_SHAPE, input_messages

MAX_INSTRUCTIONS_CHARS = 256 * 1024
MAX_METADATA_KEYS = 16  # OpenAI's limits on `metadata`: 16 pairs, keys ≤ 64, values ≤ 512 characters


@dataclass(frozen=True)
class ResponsesRequest:
    sampling: Sampling
    messages: tuple[dict, ...]  # this request's turns in chat form (instructions not included)
    images: tuple               # gateway.vision.parts.RequestImage per input_image part, in order (markers in messages)
    instructions: str | None
    tools: Tools | None
    think: bool | None
    template_kwargs: dict       # the reasoning level for the chat template (gateway.features.reasoning.effort_kwargs)
    previous_response_id: str | None
    store: bool
    echo: dict  # request fields the response object repeats (gateway.responses.events)
    ignored_fields: tuple[str, ...] = ()


def _given(body: dict, name: str, default):
    value = body.get(name)
    return default if value is None else value


def _metadata(body: dict) -> dict:
    value = get_object(body, "metadata") or {}
    if len(value) > MAX_METADATA_KEYS or any(type(v) is not str or len(k) > 64 or len(v) > 512
                                             for k, v in value.items()):
        raise invalid(f"'metadata' holds at most {MAX_METADATA_KEYS} string values (keys ≤ 64, values ≤ 512 "
                      "characters)", param="metadata")
    return value


def _text_format(body: dict) -> tuple[str | None, dict]:
    """(grammar or None, the `text` object echoed back)."""
    text = get_object(body, "text") or {}
    unknown = [k for k in text if k not in ("format", "verbosity")]
    if unknown:
        raise invalid(f"Unrecognized field 'text.{unknown[0]}'", param=f"text.{unknown[0]}", code="unknown_parameter")
    fmt = text.get("format")
    return from_text_format(fmt), {"format": fmt or {"type": "text"}, "verbosity": text.get("verbosity") or "medium"}


def _reasoning(body: dict) -> tuple[bool | None, dict]:
    """(think switch, the `reasoning` object echoed back): effort "none" turns thinking off, any
    other level on; low/medium/high also reach the chat template (effort_kwargs), and summaries
    are not generated."""
    reasoning = get_object(body, "reasoning") or {}
    unknown = [k for k in reasoning if k not in ("effort", "summary", "generate_summary")]
    if unknown:
        raise invalid(f"Unrecognized field 'reasoning.{unknown[0]}'", param=f"reasoning.{unknown[0]}",
                      code="unknown_parameter")
    effort = reasoning.get("effort")
    if effort is not None and effort not in EFFORTS:
        raise invalid(f"'reasoning.effort' must be one of {', '.join(EFFORTS)}", param="reasoning.effort")
    return think_from_openai(None, effort), {"effort": effort, "summary": None}


def parse_responses(body: dict, *, lenient: bool) -> ResponsesRequest:
    ignored = check_fields(body, RESPONSES_FIELDS, lenient)
    f = RESPONSES_FIELDS
    for name in ("background", "truncation", "service_tier", "include", "top_logprobs", "max_tool_calls",
                 "conversation", "prompt", "user", "safety_identifier", "prompt_cache_key", "stream_options"):
        f[name].read(body)
    grammar, text = _text_format(body)
    tools = parse_tools(body, flat=True)
    if tools is not None and tools.active and grammar is not None:
        raise invalid("'text.format' cannot be combined with tool calls; send tool_choice 'none'", param="text.format")
    think, reasoning = _reasoning(body)
    stream = f["stream"].read(body)
    max_tokens = f["max_output_tokens"].read(body)
    sampling = Sampling(model=f["model"].read(body), max_tokens=max_tokens, stream=stream,
                        temperature=f["temperature"].read(body), top_p=f["top_p"].read(body),
                        grammar=grammar, grammar_param="text.format" if grammar is not None else None)
    echo = {
        "instructions": f["instructions"].read(body), "max_output_tokens": max_tokens,
        "metadata": _metadata(body), "parallel_tool_calls": f["parallel_tool_calls"].read(body),
        "reasoning": reasoning, "temperature": _given(body, "temperature", 1.0), "text": text,
        "tool_choice": body.get("tool_choice") or "auto", "tools": list(body.get("tools") or []),
        "top_p": _given(body, "top_p", 1.0), "truncation": "disabled",
    }
    images: list = []
    messages = input_messages(body.get("input"), images)
    return ResponsesRequest(
        sampling=sampling,
        messages=messages,
        images=tuple(images),
        instructions=echo["instructions"],
        tools=tools,
        think=think,
        template_kwargs=effort_kwargs(reasoning["effort"]),
        previous_response_id=f["previous_response_id"].read(body),
        store=f["store"].read(body),
        echo=echo,
        ignored_fields=ignored,
    )


# --- The field table: the parser reads through it; gateway/server/openapi.py renders it ------------

_FLAT_TOOL = {"type": "object", "required": ["type", "name"], "properties": {
    "type": {"const": "function"}, "name": {"type": "string"}, "description": {"type": ["string", "null"]},
    "parameters": {"type": ["object", "null"], "description": "a JSON schema"}, "strict": {"type": ["boolean", "null"]}}}
RESPONSES_FIELDS = table(
    COMMON_FIELDS["model"],
    Custom("input", "a string, or a list of messages (text and input_image parts), function_call and "
           "function_call_output items",
           reader=lambda body: None, shape=INPUT_SHAPE),
    Str("instructions", "a system message before the input (not carried over by previous_response_id)",
        max_chars=MAX_INSTRUCTIONS_CHARS),
    Int("max_output_tokens", "most tokens to generate (capped by the context)", lo=1, hi=MAX_TOKENS_LIMIT),
    COMMON_FIELDS["temperature"],
    COMMON_FIELDS["top_p"],
    Bool("stream", default=False),
    Bool("store", "keep the response for GET /v1/responses/{id} and previous_response_id", default=True),
    Str("previous_response_id", "continue the conversation of a stored response", max_chars=128),
    Custom("tools", "function tools (flat shape)", reader=lambda body: None,
           shape={"type": ["array", "null"], "items": _FLAT_TOOL}),
    Custom("tool_choice", "none, auto (default), required, or {\"type\": \"function\", \"name\"}",
           reader=lambda body: None, shape={"anyOf": [{"type": "null"}, {"enum": list(TOOL_CHOICES)}, {
               "type": "object", "required": ["type", "name"],
               "properties": {"type": {"const": "function"}, "name": {"type": "string"}}}]}),
    Bool("parallel_tool_calls", "allow several calls in one answer", default=False),
    Custom("text", "`format`: text, json_object or json_schema (name, schema, strict)", reader=lambda body: None,
           shape={"type": ["object", "null"], "properties": {
               "format": {"type": ["object", "null"], "properties": {
                   "type": {"enum": ["text", "json_object", "json_schema"]}, "name": {"type": "string"},
                   "schema": SCHEMA_SHAPES["json_schema"][1], "strict": {"type": ["boolean", "null"]}}},
               "verbosity": {"type": ["string", "null"]}}}),
    Custom("reasoning", "`effort`: \"none\" turns thinking off, any other level on", reader=lambda body: None,
           shape={"type": ["object", "null"], "properties": {"effort": {"enum": [*EFFORTS, None]},
                                                             "summary": {}, "generate_summary": {}}}),
    Obj("metadata", f"up to {MAX_METADATA_KEYS} string pairs, returned with the response"),
    Str("user", max_chars=256),
    Str("safety_identifier", max_chars=256),
    Str("prompt_cache_key", "accepted; every prompt's prefix is cached anyway", max_chars=256),
    NoOp("background", allowed=(False,), what="background responses"),
    NoOp("truncation", allowed=("disabled",), what="truncating the input"),
    NoOp("service_tier", allowed=("auto", "default"), what="service tiers"),
    NoOp("include", allowed=([],), what="extra output fields"),
    NoOp("top_logprobs", allowed=(0,), what="log-probabilities in responses"),
    NoOp("max_tool_calls", allowed=(), what="a cap on tool calls"),
    NoOp("conversation", allowed=(), what="conversation objects (use previous_response_id)"),
    NoOp("prompt", allowed=(), what="stored prompts"),
    NoOp("stream_options", allowed=(), what="stream options"),
)
