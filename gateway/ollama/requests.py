"""Validation of Ollama /api/chat and /api/generate bodies.

Ollama semantics, not OpenAI's: `stream` defaults to true; sampling lives in `options`, whose
unknown keys are ignored (clients still send legacy ones such as mirostat or num_gpu) while a known
key of the wrong type is a 400; omitted options take Ollama's defaults (temperature 0.8, top_k 40,
top_p 0.9, repeat_penalty 1.1, repeat_last_n 64); num_predict ≤ 0 (Ollama: -1, -2) = until the context is full.
Errors are APIErrors whose message becomes Ollama's `{"error": "..."}`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from gateway.serve.lanes import GenerationParams, engine_top_p
from lanes.api import param_default
from gateway.http.errors import APIError
from gateway.http.fields import as_float32
from gateway.http.limits import MAX_MESSAGES, MAX_TOKENS_LIMIT, SEED_MAX
from gateway.ollama.keep_alive import KeepAliveError, parse_keep_alive
from gateway.ollama.logprobs import ollama_logprobs
from gateway.features.reasoning import OLLAMA_LEVELS, effort_kwargs, think_from_ollama
from gateway.features.structured import from_ollama_format
from gateway.features.tools import CALL_SHAPE, TOOL_SHAPES, Tools, parse_tools, tool_call_thinking, tool_calls_of_message
from gateway.vision.decode import ImageDecodeError, ImageTooLarge
from gateway.vision.parts import ollama_images, with_markers

MAX_STOP_STRINGS = 16
_INT32_MIN = -(1 << 31)
ROLES = ("system", "user", "assistant", "tool")


# option name → (GenerationParams field, lo, hi)
_FLOAT_OPTIONS = {"temperature": ("temperature", 0.0, 2.0), "top_p": ("top_p", 0.0, 1.0),
                  "min_p": ("min_p", 0.0, 1.0), "repeat_penalty": ("repetition_penalty", 0.0, 10.0),
                  "presence_penalty": ("presence_penalty", -2.0, 2.0),
                  "frequency_penalty": ("frequency_penalty", -2.0, 2.0)}
_INT_OPTIONS = {"top_k": ("top_k", 0, (1 << 31) - 1), "repeat_last_n": ("repeat_last_n", -1, 1 << 20)}
# Ollama's defaults for the options we honour (api/types.go DefaultOptions): these four differ from
# ours; the others (min_p 0, repeat_last_n 64, presence/frequency penalty 0) are GenerationParams'.
_OLLAMA_DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "repeat_penalty": 1.1}
DEFAULT_OPTIONS = {name: _OLLAMA_DEFAULTS.get(name, param_default(target))
                   for name, (target, _, _) in {**_FLOAT_OPTIONS, **_INT_OPTIONS}.items()}
# Accepted for compatibility, no effect here (the model, its context and threads are set at start).
IGNORED_OPTIONS_NOTE = "num_ctx, num_keep, num_batch, num_thread, num_gpu, mirostat*, tfs_z, typical_p, ..."
_CHECKED_INT_OPTIONS = ("num_ctx", "num_keep", "num_batch", "num_thread", "num_gpu", "main_gpu")


class OllamaError(APIError):
    """An error answered as Ollama does: `{"error": message}` with this status."""


def bad(message: str) -> OllamaError:
    return OllamaError(400, message)


@dataclass(frozen=True)
class OllamaRequest:
    model: str
    stream: bool
    params: GenerationParams            # max_tokens is a placeholder until the context is known
    num_predict: int | None             # None: until the context is full (or an end token)
    messages: tuple[dict, ...] = ()     # chat
    prompt: str | None = None           # generate
    system: str | None = None
    raw: bool = False
    context: tuple[int, ...] = ()       # generate: token ids of an earlier exchange (deprecated)
    keep_alive_s: float | None = None   # gateway.ollama.keep_alive: None = not given, < 0 = never unload
    think: bool | None = None           # None: the template's default
    template_kwargs: dict = field(default_factory=dict)  # think's level for the template (reasoning.effort_kwargs)
    tools: Tools | None = None          # chat: gateway.features.tools (Ollama has no tool_choice: auto)
    images: tuple = ()                  # gateway.vision.parts.RequestImage, in order (their markers are in the text)


def unknown_fields(body: dict, known: dict) -> tuple[str, ...]:
    """Ollama ignores fields it does not know (its clients add new ones first): so do we, and the
    caller logs their names."""
    return tuple(sorted(k[:64] for k in body if k not in known))


def _model(body: dict) -> str:
    value = body.get("model")
    if value is None or value == "":
        raise bad("model is required")
    if type(value) is not str:
        raise bad("model must be a string")
    return value


def _number(name: str, value, lo: float, hi: float) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise bad(f"option {name!r} must be a number")
    if not lo <= value <= hi:
        raise bad(f"option {name!r} must be between {lo:g} and {hi:g}")
    return float(value)


def _integer(name: str, value, lo: int, hi: int) -> int:
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is not int:
        raise bad(f"option {name!r} must be an integer")
    if not lo <= value <= hi:
        raise bad(f"option {name!r} must be between {lo} and {hi}")
    return value


def _options(body: dict) -> tuple[GenerationParams, int | None]:
    options = body.get("options")
    if options is None:
        options = {}
    if type(options) is not dict:
        raise bad("options must be an object")
    values = {}
    for name, (target, lo, hi) in _FLOAT_OPTIONS.items():
        raw = options.get(name, DEFAULT_OPTIONS.get(name))
        if raw is not None:
            values[target] = _number(name, raw, lo, hi)
    for name, (target, lo, hi) in _INT_OPTIONS.items():
        raw = options.get(name, DEFAULT_OPTIONS.get(name))
        if raw is not None:
            values[target] = _integer(name, raw, lo, hi)
    if as_float32(values.get("repetition_penalty", 1.0)) == 0.0:
        values["repetition_penalty"] = 1.0  # Ollama treats 0 as "off" (and the engine samples in float32)
    if "top_p" in values:
        values["top_p"] = engine_top_p(values["top_p"])
    if values.get("repeat_last_n") == -1:
        values["repeat_last_n"] = 1 << 20  # -1 = the whole context
    seed = options.get("seed")
    if seed is not None:
        seed = _integer("seed", seed, -1, SEED_MAX)
        values["seed"] = None if seed < 0 else seed
    stop = options.get("stop")
    if stop is not None:
        items = [stop] if type(stop) is str else stop
        if type(items) is not list or any(type(s) is not str for s in items) or len(items) > MAX_STOP_STRINGS:
            raise bad(f"option 'stop' must be a string or a list of at most {MAX_STOP_STRINGS} strings")
        values["stop"] = tuple(dict.fromkeys(s for s in items if s))
    num_predict = options.get("num_predict")
    if num_predict is not None:
        num_predict = _integer("num_predict", num_predict, _INT32_MIN, MAX_TOKENS_LIMIT)
        num_predict = None if num_predict <= 0 else num_predict  # Ollama's runner limits only when > 0
    for name in _CHECKED_INT_OPTIONS:
        if options.get(name) is not None:
            _integer(name, options[name], -1, 1 << 30)  # type-checked, then left to the server's setup
    return GenerationParams(max_tokens=1, logprobs=ollama_logprobs(body, bad), **values), num_predict


def _keep_alive_s(body: dict) -> float | None:
    try:
        return parse_keep_alive(body.get("keep_alive"))
    except KeepAliveError as exc:
        raise bad(str(exc)) from None


_NO_VALUES = (None, "", [], {})  # what clients send for "not used"


def _unsupported(body: dict, name: str, what: str) -> None:
    value = body.get(name)
    if value not in _NO_VALUES:
        raise bad(f"{name} is not supported by this server ({what})")


def _images(value, where: str) -> list:
    """A message's or generate's `images` (raw base64) → RequestImages; a bad one is a 400 naming it, 413 if too large."""
    try:
        return ollama_images(value, where)
    except ImageTooLarge as exc:
        raise OllamaError(413, str(exc)) from None
    except ImageDecodeError as exc:
        raise bad(str(exc)) from None


def _messages(body: dict, images: list) -> tuple[dict, ...]:
    """The turns; each message's images are appended to `images`, their markers put before its text."""
    value = body.get("messages")
    if value is None:
        return ()
    if type(value) is not list or len(value) > MAX_MESSAGES:
        raise bad(f"messages must be a list of at most {MAX_MESSAGES} messages")
    out = []
    for i, message in enumerate(value):
        if type(message) is not dict:
            raise bad(f"messages[{i}] must be an object")
        role = message.get("role")
        if role not in ROLES:
            raise bad(f"messages[{i}].role must be one of {', '.join(ROLES)}")
        content = message.get("content", "")
        if content is None:
            content = ""
        if type(content) is not str:
            raise bad(f"messages[{i}].content must be a string")
        found = _images(message.get("images"), f"messages[{i}].images")
        images += found
        # `thinking` sent back in the history is accepted and not fed to the model again, but for
        # gpt-oss's tool-call turns (tool_call_thinking).
        normal = {"role": role, "content": with_markers(content, len(found))}
        if message.get("tool_calls") is not None:  # validated on any role; only an assistant's are rendered
            calls = tool_calls_of_message(message["tool_calls"], f"messages[{i}].tool_calls")
            if role == "assistant" and calls:
                normal["tool_calls"] = calls
                tool_call_thinking(normal, message, ("thinking",))
        name = message.get("tool_name") or message.get("name")
        if role == "tool" and type(name) is str:
            normal["name"] = name
        out.append(normal)
    return tuple(out)


def parse_chat(body: dict) -> OllamaRequest:
    model = _model(body)
    params, num_predict = _options(body)
    tools = parse_tools({"tools": body.get("tools")})
    grammar = from_ollama_format(body.get("format"))
    if tools is not None and tools.active and grammar is not None:
        raise bad("format cannot be combined with tools")
    params = dataclasses.replace(params, grammar=grammar)
    stream = True if body.get("stream") is None else body["stream"]
    if type(stream) is not bool:
        raise bad("stream must be true or false")
    images: list = []
    messages = _messages(body, images)
    return OllamaRequest(model=model, stream=stream, params=params, num_predict=num_predict,
                         messages=messages, keep_alive_s=_keep_alive_s(body),
                         think=think_from_ollama(body.get("think")), tools=tools, images=tuple(images),
                         template_kwargs=effort_kwargs(body.get("think")))


def parse_generate(body: dict) -> OllamaRequest:
    model = _model(body)
    params, num_predict = _options(body)
    params = dataclasses.replace(params, grammar=from_ollama_format(body.get("format")))
    _unsupported(body, "suffix", "fill-in-the-middle")
    _unsupported(body, "template", "only the model's own template is used; send raw: true with a formatted prompt")
    images = _images(body.get("images"), "images")
    stream = True if body.get("stream") is None else body["stream"]
    raw = body.get("raw", False)
    if type(stream) is not bool or type(raw) is not bool:
        raise bad("stream and raw must be true or false")
    prompt = body.get("prompt")
    system = body.get("system")
    if prompt is not None and type(prompt) is not str:
        raise bad("prompt must be a string")
    if system is not None and type(system) is not str:
        raise bad("system must be a string")
    context = body.get("context")
    if context is None:
        context = []
    if type(context) is not list or any(type(t) is not int or t < 0 for t in context):
        raise bad("context must be a list of token ids")
    return OllamaRequest(model=model, stream=stream, params=params, num_predict=num_predict, prompt=prompt,
                         system=system, raw=raw, context=tuple(context), keep_alive_s=_keep_alive_s(body),
                         think=think_from_ollama(body.get("think")), images=tuple(images),
                         template_kwargs=effort_kwargs(body.get("think")))


# --- JSON Schema of the fields read above (gateway/server/openapi.py renders it); each shape states what
# the reader of that field accepts, so a change to one sits next to the other.

def _options_schema() -> dict:
    props: dict = {}
    for name, (_, lo, hi) in _FLOAT_OPTIONS.items():
        props[name] = {"type": ["number", "null"], "minimum": lo, "maximum": hi, "default": DEFAULT_OPTIONS.get(name)}
    for name, (_, lo, hi) in _INT_OPTIONS.items():
        props[name] = {"type": ["integer", "null"], "minimum": lo, "maximum": hi, "default": DEFAULT_OPTIONS.get(name)}
    props["seed"] = {"type": ["integer", "null"], "minimum": -1, "maximum": SEED_MAX}
    props["stop"] = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"},
                                                    "maxItems": MAX_STOP_STRINGS}, {"type": "null"}]}
    props["num_predict"] = {"type": ["integer", "null"], "minimum": _INT32_MIN, "maximum": MAX_TOKENS_LIMIT,
                            "not": {"const": 0}, "description": "-1 or -2: until the context is full"}
    for name in _CHECKED_INT_OPTIONS:
        props[name] = {"type": ["integer", "null"], "minimum": -1, "maximum": 1 << 30,
                       "description": "accepted, no effect (set when the server starts)"}
    return {"type": ["object", "null"], "properties": props, "additionalProperties": True,
            "description": f"unknown options are ignored ({IGNORED_OPTIONS_NOTE})"}


def _unsupported_shape(what: str) -> dict:
    return {"enum": list(_NO_VALUES), "description": f"not supported ({what})"}


_IMAGES = {"type": ["array", "null"], "items": {"type": "string", "description": "raw base64 (PNG, JPEG, WebP, GIF)"},
           "description": "only for a model served with a vision projector (--mmproj)"}
_MESSAGE = {"type": "object", "required": ["role"], "additionalProperties": True, "properties": {
    "role": {"enum": list(ROLES)}, "content": {"type": ["string", "null"]}, "images": _IMAGES,
    "tool_calls": {"type": ["array", "null"], "items": CALL_SHAPE}, "tool_name": {"type": ["string", "null"]},
    "thinking": {}}}
_COMMON_SHAPES = {
    "model": {"type": "string", "minLength": 1},
    "stream": {"type": ["boolean", "null"], "default": True},
    "options": _options_schema(),
    "format": {"anyOf": [{"enum": ["", "json", None]}, {"type": "object", "description": "a JSON schema"}]},
    "keep_alive": {"type": ["string", "number", "null"], "description": "how long the model stays loaded after this request: a duration (\"5m\", \"1h30m\") or seconds; 0 unloads it once idle, negative keeps it loaded"},
    "think": {"enum": [True, False, *OLLAMA_LEVELS, None]},
    "logprobs": {"type": ["boolean", "null"], "description": "each token's log-probability"},
    "top_logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 20},
}
CHAT_FIELDS = {**_COMMON_SHAPES, "messages": {"type": ["array", "null"], "items": _MESSAGE, "maxItems": MAX_MESSAGES},
               "tools": TOOL_SHAPES["tools"][1]}
GENERATE_FIELDS = {**_COMMON_SHAPES, "prompt": {"type": ["string", "null"]}, "system": {"type": ["string", "null"]},
                   "raw": {"type": "boolean", "default": False}, "images": _IMAGES,
                   "suffix": _unsupported_shape("fill-in-the-middle"), "template": _unsupported_shape("templates"),
                   "context": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0}}}


def body_schema(fields: dict) -> dict:
    """Unknown fields are ignored, as Ollama does."""
    return {"type": "object", "properties": fields, "required": ["model"], "additionalProperties": True}
