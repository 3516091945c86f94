"""Anthropic `system` and `messages` → the neutral chat turns (OpenAI-shaped dicts) the template takes.

  system (string or text blocks)   → a system turn
  user text blocks                 → one user turn (texts joined)
  user tool_result blocks          → one tool turn each (tool_call_id, name of its tool_use, the
                                     content: a string or text blocks)
  assistant text / tool_use blocks → one assistant turn with `tool_calls` (input as arguments)
  assistant thinking blocks        → dropped: reasoning is never rendered into the prompt again
  user image blocks (base64)       → an image marker in the user turn's text where the block sits, the image
                                     collected for the prompt (gateway.vision; a model without a projector → 400;
                                     a `url` source → 400, never fetched)
  document blocks                  → 400: laneserve has no document input
"""
from __future__ import annotations

from gateway.http.errors import invalid
from gateway.http.limits import MAX_MESSAGES
from gateway.vision.decode import ImageDecodeError, ImageTooLarge, payload_bytes
from gateway.vision.parts import IMAGE_MARKER, RequestImage
from gateway.vision.request import image_error

_TEXT_KEYS = {"type", "text", "cache_control", "citations"}
_BLOCK_KEYS = {
    "text": _TEXT_KEYS,
    "tool_use": {"type", "id", "name", "input", "cache_control"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
    "thinking": {"type", "thinking", "signature"},
    "redacted_thinking": {"type", "data"},
    "image": {"type", "source", "cache_control"},
}
_UNSUPPORTED = ("document", "search_result", "server_tool_use", "web_search_tool_result")


def _bad(message: str, param: str, code: str = "invalid_value"):
    return invalid(message, param=param, code=code)


def _check_block(block, param: str, lenient: bool) -> str:
    if type(block) is not dict or type(block.get("type")) is not str:
        raise _bad("each content block must be an object with a 'type'", param, "invalid_type")
    kind = block["type"]
    if kind in _UNSUPPORTED:
        raise _bad(f"'{kind}' content blocks are not supported: this server has no document input",
                   param, "unsupported_content")
    if kind not in _BLOCK_KEYS:
        raise _bad("content blocks must be text, image, tool_use, tool_result or thinking", f"{param}.type")
    unknown = sorted(set(block) - _BLOCK_KEYS[kind])
    if unknown and not lenient:
        raise _bad(f"unsupported {kind} block field '{unknown[0]}'", param, "unknown_parameter")
    return kind


def _text(block: dict, param: str) -> str:
    if type(block.get("text")) is not str:
        raise _bad("a text block needs 'text' (a string)", f"{param}.text", "invalid_type")
    return block["text"]


def _texts(value, param: str, lenient: bool) -> str:
    """A string, or text blocks joined (system prompts, tool results)."""
    if type(value) is str:
        return value
    if type(value) is not list:
        raise _bad("must be a string or an array of text blocks", param, "invalid_type")
    out = []
    for j, block in enumerate(value):
        if _check_block(block, f"{param}[{j}]", lenient) != "text":
            raise _bad("only text blocks are allowed here", f"{param}[{j}].type")
        out.append(_text(block, f"{param}[{j}]"))
    return "".join(out)


def _tool_call(block: dict, param: str) -> dict:
    if type(block.get("id")) is not str or type(block.get("name")) is not str:
        raise _bad("a tool_use block needs 'id' and 'name' strings", param, "invalid_type")
    if type(block.get("input")) is not dict:
        raise _bad("a tool_use block's 'input' must be an object", f"{param}.input", "invalid_type")
    return {"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": block["input"]}}


def _tool_turn(block: dict, param: str, names: dict, lenient: bool) -> dict:
    call_id = block.get("tool_use_id")
    if type(call_id) is not str:
        raise _bad("a tool_result block needs 'tool_use_id' (a string)", f"{param}.tool_use_id", "invalid_type")
    content = block.get("content")
    text = "" if content is None else _texts(content, f"{param}.content", lenient)
    turn = {"role": "tool", "tool_call_id": call_id, "content": text}
    if call_id in names:
        turn["name"] = names[call_id]
    return turn


def _image(block: dict, param: str) -> RequestImage:
    """An image block's picture: a base64 source (a `url` source is refused, never fetched)."""
    source = block.get("source")
    kind = source.get("type") if type(source) is dict else None
    if kind not in ("base64", "url"):
        raise _bad("an image block's source must be {\"type\": \"base64\", \"media_type\", \"data\"}",
                   f"{param}.source")
    try:
        return RequestImage(param, payload_bytes(source.get("data" if kind == "base64" else "url"), param))
    except (ImageDecodeError, ImageTooLarge) as exc:
        raise image_error(exc, param) from None


def _turns(message, i: int, names: dict, lenient: bool, images: list) -> list[dict]:
    param = f"messages[{i}]"
    if type(message) is not dict:
        raise _bad("each message must be an object", param, "invalid_type")
    unknown = sorted(set(message) - {"role", "content"})
    if unknown and not lenient:
        raise _bad(f"unsupported message field '{unknown[0]}'", param, "unknown_parameter")
    role, content = message.get("role"), message.get("content")
    if role not in ("user", "assistant"):
        raise _bad("message role must be 'user' or 'assistant'", f"{param}.role")
    if type(content) is str:
        return [{"role": role, "content": content}]
    if type(content) is not list:
        raise _bad("message content must be a string or an array of content blocks", f"{param}.content",
                   "invalid_type")
    texts, calls, tool_turns = [], [], []
    for j, block in enumerate(content):
        at = f"{param}.content[{j}]"
        kind = _check_block(block, at, lenient)
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "image" and role == "user":
            images.append(_image(block, at))
            texts.append(IMAGE_MARKER)
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_call(block, at))
            names[block["id"]] = block["name"]
        elif kind == "tool_result" and role == "user":
            tool_turns.append(_tool_turn(block, at, names, lenient))
        elif kind in ("tool_use", "tool_result", "image"):
            raise _bad(f"'{kind}' blocks belong in {'assistant' if kind == 'tool_use' else 'user'} messages", at)
    turn = {"role": role, "content": "".join(texts)}
    if calls:
        turn["tool_calls"] = calls
    return tool_turns + ([turn] if texts or calls or not tool_turns else [])


def chat_messages(body: dict, lenient: bool, images: list | None = None) -> list[dict]:
    """The request's turns, system first, in the shape gateway.openai.requests.parse_messages normalises; the
    user turns' images are appended to `images` (their markers are in the text)."""
    images = [] if images is None else images
    value = body.get("messages")
    if value is None:
        raise _bad("'messages' is required", "messages", "missing_required_parameter")
    if type(value) is not list or not value:
        raise _bad("'messages' must be a non-empty array", "messages", "invalid_type")
    if len(value) > MAX_MESSAGES:
        raise _bad(f"'messages' accepts at most {MAX_MESSAGES} entries", "messages")
    out = []
    system = body.get("system")
    if system is not None:
        text = _texts(system, "system", lenient)
        if text:
            out.append({"role": "system", "content": text})
    names: dict = {}  # tool_use id → tool name, for the tool turns that answer it
    for i, message in enumerate(value):
        out.extend(_turns(message, i, names, lenient, images))
    return out


# --- OpenAPI shapes (gateway.anthropic.requests' field table) ---------------------------------------
_TEXT_BLOCK = {"type": "object", "required": ["type", "text"],
               "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}
SYSTEM_SHAPE = {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_BLOCK}, {"type": "null"}]}


def message_shape() -> dict:
    blocks = [
        _TEXT_BLOCK,
        {"type": "object", "required": ["type", "id", "name", "input"], "properties": {
            "type": {"const": "tool_use"}, "id": {"type": "string"}, "name": {"type": "string"},
            "input": {"type": "object"}}},
        {"type": "object", "required": ["type", "tool_use_id"], "properties": {
            "type": {"const": "tool_result"}, "tool_use_id": {"type": "string"},
            "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_BLOCK}]},
            "is_error": {"type": "boolean"}}},
        {"type": "object", "required": ["type", "source"], "properties": {
            "type": {"const": "image"}, "source": {"type": "object", "required": ["type"], "properties": {
                "type": {"enum": ["base64", "url"]}, "media_type": {"type": "string"}, "data": {"type": "string"},
                "url": {"type": "string"}}}},
         "description": "user messages, for a model served with a vision projector (--mmproj); a url source is "
                        "refused (never fetched)"},
        {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["thinking", "redacted_thinking"]}},
         "description": "sent back from an earlier answer; dropped"},
    ]
    return {"type": "object", "required": ["role", "content"], "additionalProperties": False, "properties": {
        "role": {"enum": ["user", "assistant"]},
        "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"anyOf": blocks}}]}}}
