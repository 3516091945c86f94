"""Validation of POST /v1/messages and /v1/messages/count_tokens bodies.

Strict like the OpenAI routes (unknown field → 400 naming it; `--lenient` ignores and logs it).
An Anthropic request becomes the neutral chat request the planner takes
(gateway.openai.requests.ChatRequest): `system` the first turn, text blocks joined, `tool_use`
blocks an assistant's tool calls, `tool_result` blocks tool turns, `thinking` blocks sent back in
the history dropped (reasoning is never rendered again); `tools` and `tool_choice` go through the
same tool parser as OpenAI's (gateway.features.tools.parse_tools).
"""
from __future__ import annotations

from dataclasses import dataclass

from gateway.anthropic.messages import SYSTEM_SHAPE, chat_messages, message_shape
from gateway.features.tools import MAX_NAME_CHARS, MAX_TOOLS, Tools, parse_tools
from gateway.http.errors import invalid
from gateway.http.fields import Bool, Custom, Float, Int, Obj, table
from gateway.http.limits import MAX_TOKENS_LIMIT
from gateway.openai.requests import (MAX_STOP_CHARS, MAX_STOP_STRINGS, ChatRequest, Sampling, check_fields,
                                     _model, parse_messages)
from lanes.api import param_default

MIN_THINKING_BUDGET = 1024  # Anthropic's minimum budget_tokens


@dataclass(frozen=True)
class MessagesRequest:
    chat: ChatRequest  # what the planner takes (gateway.features.chat_prompt)
    stop_sequences: tuple[str, ...] = ()
    ignored_fields: tuple[str, ...] = ()


def _bad(message: str, param: str, code: str = "invalid_value"):
    return invalid(message, param=param, code=code)


def _max_tokens(body: dict) -> int:
    if body.get("max_tokens") is None:
        raise _bad("'max_tokens' is required", "max_tokens", "missing_required_parameter")
    return MESSAGES_FIELDS["max_tokens"].read(body)


def _stop_sequences(body: dict) -> tuple[str, ...]:
    value = body.get("stop_sequences")
    if value is None:
        return ()
    if type(value) is not list or any(type(s) is not str for s in value):
        raise _bad("'stop_sequences' must be an array of strings", "stop_sequences", "invalid_type")
    if len(value) > MAX_STOP_STRINGS:
        raise _bad(f"'stop_sequences' accepts at most {MAX_STOP_STRINGS} strings", "stop_sequences")
    if any(not s or len(s) > MAX_STOP_CHARS for s in value):
        raise _bad(f"each stop sequence must have 1 to {MAX_STOP_CHARS} characters", "stop_sequences")
    return tuple(dict.fromkeys(value))


def _tool(tool, i: int) -> dict:
    """An Anthropic tool as an OpenAI function (parse_tools validates the rest)."""
    param = f"tools[{i}]"
    if type(tool) is not dict:
        raise _bad("each tool must be an object", param, "invalid_type")
    unknown = sorted(set(tool) - {"name", "description", "input_schema", "type", "cache_control"})
    if unknown:
        raise _bad(f"unsupported tool field '{unknown[0]}'", param, "unknown_parameter")
    if tool.get("type") not in (None, "custom"):
        raise _bad("only custom tools (name, description, input_schema) are supported", f"{param}.type")
    if type(tool.get("input_schema")) is not dict:
        raise _bad("a tool needs an 'input_schema' object", f"{param}.input_schema", "invalid_type")
    function = {"name": tool.get("name"), "parameters": tool["input_schema"]}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(value, has_tools: bool) -> tuple[object, object]:
    """(OpenAI tool_choice, parallel_tool_calls) of Anthropic's tool_choice."""
    if value is None:
        return None, None
    kind = value.get("type") if type(value) is dict else None
    if kind not in ("auto", "any", "tool", "none"):
        raise _bad("'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}", "tool_choice")
    unknown = sorted(set(value) - {"type", "name", "disable_parallel_tool_use"})
    if unknown:
        raise _bad(f"unsupported tool_choice field '{unknown[0]}'", "tool_choice", "unknown_parameter")
    disable = value.get("disable_parallel_tool_use")
    if disable is not None and type(disable) is not bool:
        raise _bad("'disable_parallel_tool_use' must be true or false", "tool_choice", "invalid_type")
    parallel = None if disable is None else not disable
    if kind == "tool":
        if type(value.get("name")) is not str:
            raise _bad("tool_choice of type 'tool' needs the tool's 'name'", "tool_choice")
        return {"type": "function", "function": {"name": value["name"]}}, parallel
    if kind in ("any", "tool") and not has_tools:
        raise _bad("'tool_choice' needs 'tools'", "tool_choice")
    return {"auto": "auto", "any": "required", "none": "none"}[kind], parallel


def _tools(body: dict) -> Tools | None:
    value = body.get("tools")
    if value is not None and (type(value) is not list or len(value) > MAX_TOOLS):
        raise _bad(f"'tools' must be an array of at most {MAX_TOOLS} tools", "tools", "invalid_type")
    functions = [_tool(t, i) for i, t in enumerate(value or [])]
    choice, parallel = _tool_choice(body.get("tool_choice"), bool(functions))
    return parse_tools({"tools": functions, "tool_choice": choice, "parallel_tool_calls": parallel})


def _think(body: dict, max_tokens: int | None) -> bool | None:
    """`thinking`: enabled → think, disabled → not; absent → the model's default."""
    value = body.get("thinking")
    if value is None:
        return None
    kind = value.get("type") if type(value) is dict else None
    if kind == "disabled" and set(value) == {"type"}:
        return False
    if kind != "enabled" or not set(value) <= {"type", "budget_tokens"}:
        raise _bad("'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}",
                   "thinking")
    budget = value.get("budget_tokens")
    if type(budget) is not int or budget < MIN_THINKING_BUDGET:
        raise _bad(f"'thinking.budget_tokens' must be an integer >= {MIN_THINKING_BUDGET}", "thinking.budget_tokens")
    if max_tokens is not None and budget >= max_tokens:
        raise _bad("'thinking.budget_tokens' must be less than 'max_tokens'", "thinking.budget_tokens")
    return True


def _metadata(body: dict) -> None:
    value = MESSAGES_FIELDS["metadata"].read(body)
    if value and (set(value) - {"user_id"} or type(value.get("user_id", "")) not in (str, type(None))):
        raise _bad("'metadata' accepts only 'user_id' (a string)", "metadata")


def parse_messages_request(body: dict, *, lenient: bool, count_only: bool = False) -> MessagesRequest:
    """A /v1/messages body (count_only: a /v1/messages/count_tokens body)."""
    fields = COUNT_FIELDS if count_only else MESSAGES_FIELDS
    ignored = check_fields(body, frozenset(fields), lenient)
    max_tokens = None if count_only else _max_tokens(body)
    f = MESSAGES_FIELDS
    stop = () if count_only else _stop_sequences(body)
    if not count_only:
        _metadata(body)
    sampling = Sampling(
        model=_model(body), max_tokens=max_tokens, stream=False if count_only else f["stream"].read(body),
        temperature=f["temperature"].read(body), top_p=f["top_p"].read(body), top_k=f["top_k"].read(body),
        stop=stop,
    )
    images: list = []
    messages = parse_messages({"messages": chat_messages(body, lenient, images)}, lenient=True)
    chat = ChatRequest(sampling=sampling, messages=messages, ignored_fields=ignored, think=_think(body, max_tokens),
                       think_param="thinking", tools=_tools(body), images=tuple(images))
    return MessagesRequest(chat, stop, ignored)


# --- The field tables: the parsers above read through them; gateway/server/openapi.py renders them ------

_TOOL_SHAPE = {"type": "object", "required": ["name", "input_schema"], "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS}, "description": {"type": "string"},
    "input_schema": {"type": "object", "description": "a JSON schema"}, "type": {"const": "custom"},
    "cache_control": {"type": "object", "description": "accepted, no effect"}}, "additionalProperties": False}
_TOOL_CHOICE_SHAPE = {"type": "object", "required": ["type"], "properties": {
    "type": {"enum": ["auto", "any", "tool", "none"]}, "name": {"type": "string"},
    "disable_parallel_tool_use": {"type": "boolean"}}, "additionalProperties": False}
_THINKING_SHAPE = {"anyOf": [
    {"type": "object", "required": ["type", "budget_tokens"], "additionalProperties": False, "properties": {
        "type": {"const": "enabled"}, "budget_tokens": {"type": "integer", "minimum": MIN_THINKING_BUDGET}}},
    {"type": "object", "required": ["type"], "additionalProperties": False,
     "properties": {"type": {"const": "disabled"}}}]}
_STOP_SHAPE = {"type": ["array", "null"], "maxItems": MAX_STOP_STRINGS,
               "items": {"type": "string", "minLength": 1, "maxLength": MAX_STOP_CHARS}}
_PROMPT_FIELDS = (
    Custom("model", "a served model name (GET /v1/models)", reader=_model, shape={"type": "string"}),
    Custom("messages", "user and assistant turns: a string or text, tool_use, tool_result (and thinking, "
           "dropped) blocks; image blocks (base64) for a model served with --mmproj", reader=lambda body: None,
           shape={"type": "array", "minItems": 1, "items": message_shape()}),
    Custom("system", "a string or text blocks", reader=lambda body: None, shape=SYSTEM_SHAPE),
    Custom("tools", "functions the model may call", reader=lambda body: None,
           shape={"type": ["array", "null"], "maxItems": MAX_TOOLS, "items": _TOOL_SHAPE}),
    Custom("tool_choice", "auto (default), any, tool (+ name) or none", reader=lambda body: None,
           shape=_TOOL_CHOICE_SHAPE),
    Custom("thinking", "enabled (thinking models: `thinking` blocks; the budget does not bound them) or disabled; "
           "absent: the model's default", reader=lambda body: None, shape=_THINKING_SHAPE),
)
MESSAGES_FIELDS = table(
    *_PROMPT_FIELDS,
    Int("max_tokens", "most tokens to generate (capped by the context: stop_reason max_tokens)", lo=1,
        hi=MAX_TOKENS_LIMIT),
    Custom("stop_sequences", f"up to {MAX_STOP_STRINGS} strings", reader=lambda body: None, shape=_STOP_SHAPE),
    Float("temperature", default=param_default("temperature"), lo=0.0, hi=2.0),
    Float("top_p", "0 = only the most likely token", default=param_default("top_p"), lo=0.0, hi=1.0),
    Int("top_k", "0 = off", default=param_default("top_k"), lo=0, hi=(1 << 31) - 1),
    Obj("metadata", "accepted: `user_id`"),
    Bool("stream", "SSE events", default=False),
)
MESSAGES_REQUIRED = ("model", "max_tokens", "messages")
COUNT_FIELDS = table(*_PROMPT_FIELDS)
COUNT_REQUIRED = ("model", "messages")

