"""OpenAI chat `messages` → the normalised turns the chat template renders ({"role", "content"[, tool fields]}).

Content is a string or an array of parts: `text`, and — when the caller collects images (the chat route) —
`image_url` data URIs, each replaced by an image marker where it sits (gateway.vision.parts). Callers that take
text only (/tokenize, Anthropic's converted turns) keep refusing image parts.
"""
from __future__ import annotations

from gateway.features.tools import CALL_SHAPE, tool_call_thinking, tool_calls_of_message
from gateway.http.errors import invalid, safe_repr
from gateway.http.limits import MAX_MESSAGES
from gateway.vision.decode import ImageDecodeError, ImageTooLarge
from gateway.vision.parts import openai_content
from gateway.vision.request import image_error

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")

# Fields of the openai client's own assistant messages (a returned message sent back as history):
# accepted when null; their features (legacy function_call turns, audio replies) are not served.
_NULL_ONLY = {"function_call": "legacy function_call turns (send tool_calls)", "audio": "audio replies"}
# reasoning_content (vLLM, llama-server, DeepSeek), reasoning (OpenRouter, vLLM), thinking (Ollama):
# accepted on assistant messages and never rendered into the prompt again.
_MESSAGE_FIELDS = frozenset({"role", "content", "name", "reasoning_content", "reasoning", "thinking", "tool_calls",
                             "tool_call_id", "tool_name", "refusal", "annotations", "parsed", *_NULL_ONLY})


def _message_content(message: dict, index: int, images: list | None) -> str:
    param = f"messages[{index}].content"
    content = message.get("content")
    if content is None:
        return ""  # assistant turns may carry only tool calls; we render them empty
    if type(content) is str:
        return content
    if type(content) is not list:
        raise invalid("message content must be a string or an array of text parts", param=param, code="invalid_type")
    if images is not None and any(type(p) is dict and p.get("type") == "image_url" for p in content):
        try:
            text, found = openai_content(content, param)
        except (ImageDecodeError, ImageTooLarge) as exc:
            raise image_error(exc, param) from None
        images += found
        return text
    texts = []
    for part in content:
        if type(part) is not dict or part.get("type") != "text" or type(part.get("text")) is not str:
            raise invalid("only text content parts are supported", param=param, code="unsupported_parameter")
        texts.append(part["text"])
    return "".join(texts)


def parse_messages(body: dict, lenient: bool, images: list | None = None) -> tuple[dict, ...]:
    """The turns; with `images` (a list), image_url parts are accepted and their RequestImages appended to it."""
    value = body.get("messages")
    if value is None:
        raise invalid("'messages' is required", param="messages", code="missing_required_parameter")
    if type(value) is not list or not value:
        raise invalid("'messages' must be a non-empty array", param="messages", code="invalid_type")
    if len(value) > MAX_MESSAGES:
        raise invalid(f"'messages' accepts at most {MAX_MESSAGES} entries", param="messages")
    out = []
    for i, message in enumerate(value):
        if type(message) is not dict:
            raise invalid("each message must be an object", param=f"messages[{i}]", code="invalid_type")
        unknown = [k for k in message if k not in _MESSAGE_FIELDS]
        if unknown and not lenient:
            raise invalid(f"Unrecognized message field {safe_repr(unknown[0])}", param=f"messages[{i}]",
                          code="unknown_parameter")
        for key, what in _NULL_ONLY.items():
            if message.get(key) is not None:
                raise invalid(f"message {key} is not supported ({what}); only null", param=f"messages[{i}].{key}",
                              code="unsupported_parameter")
        role = message.get("role")
        if role not in CHAT_ROLES:
            raise invalid(f"message role must be one of {', '.join(CHAT_ROLES)}", param=f"messages[{i}].role")
        for key in ("name", "tool_call_id", "tool_name"):
            if message.get(key) is not None and type(message[key]) is not str:
                raise invalid(f"message {key} must be a string", param=f"messages[{i}].{key}", code="invalid_type")
        # "developer" is OpenAI's newer name for the system turn; templates know only "system".
        # reasoning_content / reasoning / thinking are not fed back into the prompt, but for gpt-oss's
        # tool-call turns (tool_call_thinking).
        normal = {"role": "system" if role == "developer" else role,
                  "content": _message_content(message, i, images)}
        if message.get("tool_calls") is not None:  # validated on any role; only an assistant's are rendered
            calls = tool_calls_of_message(message["tool_calls"], f"messages[{i}].tool_calls")
            if role == "assistant" and calls:
                normal["tool_calls"] = calls
                tool_call_thinking(normal, message, ("reasoning_content", "reasoning", "thinking"))
        if role == "tool":
            name = message.get("name") or message.get("tool_name")
            normal.update({k: v for k, v in (("tool_call_id", message.get("tool_call_id")), ("name", name)) if v})
        out.append(normal)
    return tuple(out)


def message_shape() -> dict:
    text = {"type": "object", "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
            "required": ["type", "text"]}
    url = {"type": "string", "description": "a data: URI (base64); remote URLs are refused, never fetched"}
    image = {"type": "object", "required": ["type", "image_url"], "properties": {
        "type": {"const": "image_url"},
        "image_url": {"anyOf": [url, {"type": "object", "required": ["url"], "properties": {
            "url": url, "detail": {"description": "accepted and ignored"}}}]}},
        "description": "only for a model served with a vision projector (--mmproj)"}
    return {
        "type": "object",
        "properties": {
            "role": {"enum": list(CHAT_ROLES)},
            "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"anyOf": [text, image]}},
                                  {"type": "null"}]},
            "name": {"type": ["string", "null"]},
            "reasoning_content": {}, "reasoning": {}, "thinking": {},
            "tool_calls": {"type": ["array", "null"], "items": CALL_SHAPE},
            "tool_call_id": {"type": ["string", "null"]}, "tool_name": {"type": ["string", "null"]},
            "refusal": {}, "annotations": {"description": "accepted and ignored"},
            "parsed": {"description": "accepted and ignored"},
            **{key: {"type": "null", "description": f"not supported ({what})"} for key, what in _NULL_ONLY.items()},
        },
        "required": ["role"],
        "additionalProperties": False,
    }


def message_schema(lenient: bool) -> dict:
    """Messages are closed like the body unless the server runs --lenient."""
    shape = message_shape()
    shape["additionalProperties"] = lenient
    return shape
