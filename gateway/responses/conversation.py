"""The Responses API's `input` as chat turns (the form templates render, gateway.features.tools).

`input` is a string (one user turn) or a list of items: messages (with or without
`"type": "message"`; content a string or `input_text` / `output_text` parts), `function_call`
items (an assistant's tool calls, merged into one assistant turn when consecutive) and
`function_call_output` items (tool turns). Clients send their own earlier output items back as
they got them (with `id`, `status`, `annotations`, `logprobs`; reasoning items): accepted, and
reasoning is never rendered into the prompt again. A message's `input_image` parts (data: URIs) become an
image marker where each sits, their images collected in order (gateway.vision.parts); files and audio → 400.
"""
from __future__ import annotations

from gateway.features.tools import tool_calls_of_message
from gateway.http.errors import invalid, safe_repr
from gateway.http.limits import MAX_MESSAGES
from gateway.vision.decode import ImageDecodeError, ImageTooLarge
from gateway.vision.parts import IMAGE_MARKER, FileIdImage, RequestImage, responses_image
from gateway.vision.request import image_error

ROLES = ("user", "system", "developer", "assistant")
_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
_ITEM_FIELDS = {
    "message": frozenset({"type", "role", "content", "id", "status", "phase"}),
    "function_call": frozenset({"type", "id", "call_id", "name", "arguments", "status", "namespace"}),
    "function_call_output": frozenset({"type", "id", "call_id", "output", "status"}),
    "reasoning": frozenset({"type", "id", "summary", "content", "encrypted_content", "status"}),
}
_PART_FIELDS = frozenset({"type", "text", "annotations", "logprobs"})
_IMAGE_FIELDS = frozenset({"type", "image_url", "file_id", "detail", "prompt_cache_breakpoint"})


def _string(item: dict, key: str, param: str) -> str:
    value = item.get(key)
    if type(value) is not str:
        raise invalid(f"'{param}.{key}' must be a string", param=f"{param}.{key}", code="invalid_type")
    return value


def _image(part: dict, at: str) -> RequestImage:
    unknown = [k for k in part if k not in _IMAGE_FIELDS]
    if unknown:
        raise invalid(f"Unrecognized content part field {safe_repr(unknown[0])}", param=at, code="unknown_parameter")
    try:
        return responses_image(part, at)
    except FileIdImage as exc:
        raise invalid(str(exc), param=at, code="unsupported_parameter") from None
    except (ImageDecodeError, ImageTooLarge) as exc:
        raise image_error(exc, at) from None


def _text(content, param: str, images: list | None = None) -> str:
    """A message's or a tool output's content: a string, or text parts joined; with `images` (a message's),
    input_image parts too: IMAGE_MARKER in the text, the image appended to `images`."""
    if type(content) is str:
        return content
    if type(content) is not list:
        raise invalid(f"'{param}' must be a string or an array of content parts", param=param, code="invalid_type")
    texts = []
    for i, part in enumerate(content):
        at = f"{param}[{i}]"
        kind = part.get("type") if type(part) is dict else None
        if kind == "input_image" and images is not None:
            images.append(_image(part, at))
            texts.append(IMAGE_MARKER)
            continue
        if kind == "input_image":
            raise invalid("'input_image' parts are taken in messages only", param=at, code="unsupported_parameter")
        if kind in ("input_file", "input_audio"):
            raise invalid(f"'{kind}' parts are not supported by this server", param=at, code="unsupported_parameter")
        if kind == "refusal":
            continue
        if kind not in _TEXT_PARTS:
            raise invalid("a content part must be an object with a text type (input_text, output_text)", param=at)
        unknown = [k for k in part if k not in _PART_FIELDS]
        if unknown:
            raise invalid(f"Unrecognized content part field {safe_repr(unknown[0])}", param=at,
                          code="unknown_parameter")
        texts.append(_string(part, "text", at))
    return "".join(texts)


def _check_item(item: dict, kind: str, param: str) -> None:
    unknown = [k for k in item if k not in _ITEM_FIELDS[kind]]
    if unknown:
        raise invalid(f"Unrecognized field {safe_repr(unknown[0])} in a {kind} item", param=param,
                      code="unknown_parameter")


def _message(item: dict, param: str, images: list | None) -> dict:
    role = item.get("role")
    if role not in ROLES:
        raise invalid(f"a message's role must be one of {', '.join(ROLES)}", param=f"{param}.role")
    # "developer" is the newer name of the system turn; templates know only "system".
    content = _text(item.get("content"), f"{param}.content", images)
    return {"role": "system" if role == "developer" else role, "content": content}


def _call(item: dict, param: str) -> dict:
    call = {"id": _string(item, "call_id", param), "type": "function",
            "function": {"name": _string(item, "name", param), "arguments": _string(item, "arguments", param)}}
    return tool_calls_of_message([call], param)[0]


def input_messages(value, images: list | None = None) -> tuple[dict, ...]:
    """The turns of `input`; with `images` (a list), input_image parts are accepted and their images appended to
    it (their markers are in the text)."""
    if value is None:
        raise invalid("'input' is required", param="input", code="missing_required_parameter")
    if type(value) is str:
        return ({"role": "user", "content": value},)
    if type(value) is not list or not value:
        raise invalid("'input' must be a string or a non-empty array of items", param="input", code="invalid_type")
    if len(value) > MAX_MESSAGES:
        raise invalid(f"'input' accepts at most {MAX_MESSAGES} items", param="input")
    out: list[dict] = []
    names: dict[str, str] = {}  # call_id → function name, for the tool turns that answer them
    for i, item in enumerate(value):
        param = f"input[{i}]"
        if type(item) is not dict:
            raise invalid("each input item must be an object", param=param, code="invalid_type")
        kind = item.get("type", "message")
        if kind not in _ITEM_FIELDS:
            raise invalid(f"input items of type {safe_repr(kind)} are not supported", param=f"{param}.type",
                          code="unsupported_parameter")
        _check_item(item, kind, param)
        if kind == "message":
            out.append(_message(item, param, images))
        elif kind == "function_call":
            call = _call(item, param)
            names[call["id"]] = call["function"]["name"]
            if out and out[-1]["role"] == "assistant" and "tool_calls" in out[-1]:
                out[-1]["tool_calls"].append(call)
            elif out and out[-1]["role"] == "assistant":
                out[-1] = {**out[-1], "tool_calls": [call]}
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = _string(item, "call_id", param)
            turn = {"role": "tool", "content": _text(item.get("output"), f"{param}.output"), "tool_call_id": call_id}
            if call_id in names:
                turn["name"] = names[call_id]
            out.append(turn)
        # reasoning items: the model's own thoughts are not fed back
    return tuple(out)


_PART = {"type": "object", "required": ["type"], "properties": {
    "type": {"enum": list(_TEXT_PARTS) + ["refusal"]}, "text": {"type": "string"}}}
_IMAGE_PART = {"type": "object", "required": ["type", "image_url"], "properties": {
    "type": {"const": "input_image"},
    "image_url": {"type": "string", "description": "a data: URI (base64); remote URLs are refused, never fetched"},
    "detail": {"description": "accepted and ignored"}},
    "description": "only for a model served with a vision projector (--mmproj); file_id is not supported"}
INPUT_SHAPE = {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "maxItems": MAX_MESSAGES, "items": {
    "type": "object", "properties": {
        "type": {"enum": list(_ITEM_FIELDS)}, "role": {"enum": list(ROLES)},
        "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"anyOf": [_PART, _IMAGE_PART]}}]},
        "call_id": {"type": "string"}, "name": {"type": "string"}, "arguments": {"type": "string"},
        "output": {"anyOf": [{"type": "string"}, {"type": "array", "items": _PART}]}}}}]}
