"""Validation of Ollama /api/chat and /api/generate bodies.

Ollama semantics, not OpenAI's: `stream` defaults to true; sampling lives in `options`, whose
unknown keys are ignored (clients still send legacy ones such as mirostat or num_gpu) while a known
key of the wrong type is a 400; omitted options take Ollama's defaults (temperature 0.8, top_k 40,
top_p 0.9, repeat_penalty 1.1, repeat_last_n 64); num_predict -1/-2 = until the context is full.
Errors are APIErrors whose message becomes Ollama's `{"error": "..."}`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.backend import GenerationParams
from gateway.errors import APIError
from gateway.ollama.logprobs import ollama_logprobs
from gateway.reasoning import think_from_ollama

MAX_MESSAGES = 1024
MAX_STOP_STRINGS = 16
MAX_TOKENS_LIMIT = 1 << 20
SEED_MAX = (1 << 64) - 1
ROLES = ("system", "user", "assistant", "tool")

CHAT_FIELDS = frozenset({"model", "messages", "tools", "format", "options", "stream", "keep_alive", "think",
                         "logprobs", "top_logprobs"})
GENERATE_FIELDS = frozenset({"model", "prompt", "suffix", "system", "template", "context", "stream", "raw",
                             "format", "images", "options", "keep_alive", "think", "logprobs", "top_logprobs"})

# Ollama's defaults for the options we honour (api/types.go DefaultOptions).
DEFAULT_OPTIONS = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "min_p": 0.0, "repeat_penalty": 1.1,
                   "repeat_last_n": 64, "presence_penalty": 0.0, "frequency_penalty": 0.0}
# option name → (GenerationParams field, kind, lo, hi)
_FLOAT_OPTIONS = {"temperature": ("temperature", 0.0, 2.0), "top_p": ("top_p", 0.0, 1.0),
                  "min_p": ("min_p", 0.0, 1.0), "repeat_penalty": ("repetition_penalty", 0.0, 10.0),
                  "presence_penalty": ("presence_penalty", -2.0, 2.0),
                  "frequency_penalty": ("frequency_penalty", -2.0, 2.0)}
_INT_OPTIONS = {"top_k": ("top_k", 0, (1 << 31) - 1), "repeat_last_n": ("repeat_last_n", -1, 1 << 20)}
# Accepted for compatibility, no effect here (the model, its context and threads are set at start).
IGNORED_OPTIONS_NOTE = "num_ctx, num_keep, num_batch, num_thread, num_gpu, mirostat*, tfs_z, typical_p, ..."


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
    keep_alive_zero: bool = False       # keep_alive 0: an empty request "unloads"
    think: bool | None = None           # None: the template's default


def unknown_fields(body: dict, known: frozenset) -> tuple[str, ...]:
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
    if values.get("repetition_penalty") == 0.0:
        values["repetition_penalty"] = 1.0  # Ollama treats 0 as "off"
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
        num_predict = _integer("num_predict", num_predict, -2, MAX_TOKENS_LIMIT)
        if num_predict == 0:
            raise bad("option 'num_predict' must not be 0")
        num_predict = None if num_predict < 0 else num_predict
    for name in ("num_ctx", "num_keep", "num_batch", "num_thread", "num_gpu", "main_gpu"):
        if options.get(name) is not None:
            _integer(name, options[name], -1, 1 << 30)  # type-checked, then left to the server's setup
    return GenerationParams(max_tokens=1, logprobs=ollama_logprobs(body, bad), **values), num_predict


def _keep_alive_zero(body: dict) -> bool:
    value = body.get("keep_alive")
    if value is None:
        return False
    if type(value) in (int, float):
        return value == 0
    if type(value) is str:
        return value.strip() in ("0", "0s", "0m", "0h")
    raise bad("keep_alive must be a duration string or a number of seconds")


def _unsupported(body: dict, name: str, what: str) -> None:
    value = body.get(name)
    if value not in (None, "", [], {}):
        raise bad(f"{name} is not supported by this server ({what})")


def _messages(body: dict) -> tuple[dict, ...]:
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
        if message.get("images"):
            raise bad("this model does not support images")
        if message.get("tool_calls"):
            raise bad("tool calls are not supported by this server")
        # `thinking` sent back in the history is accepted and not fed to the model again.
        out.append({"role": role, "content": content})
    return tuple(out)


def parse_chat(body: dict) -> OllamaRequest:
    model = _model(body)
    params, num_predict = _options(body)
    _unsupported(body, "tools", "tool calling")
    _unsupported(body, "format", "structured output")
    stream = body.get("stream", True)
    if type(stream) is not bool:
        raise bad("stream must be true or false")
    return OllamaRequest(model=model, stream=stream, params=params, num_predict=num_predict,
                         messages=_messages(body), keep_alive_zero=_keep_alive_zero(body),
                         think=think_from_ollama(body.get("think")))


def parse_generate(body: dict) -> OllamaRequest:
    model = _model(body)
    params, num_predict = _options(body)
    _unsupported(body, "format", "structured output")
    _unsupported(body, "suffix", "fill-in-the-middle")
    _unsupported(body, "template", "only the model's own template is used; send raw: true with a formatted prompt")
    if body.get("images"):
        raise bad("this model does not support images")
    stream = body.get("stream", True)
    raw = body.get("raw", False)
    if type(stream) is not bool or type(raw) is not bool:
        raise bad("stream and raw must be true or false")
    prompt = body.get("prompt")
    system = body.get("system")
    if prompt is not None and type(prompt) is not str:
        raise bad("prompt must be a string")
    if system is not None and type(system) is not str:
        raise bad("system must be a string")
    context = body.get("context") or []
    if type(context) is not list or any(type(t) is not int or t < 0 for t in context):
        raise bad("context must be a list of token ids")
    return OllamaRequest(model=model, stream=stream, params=params, num_predict=num_predict, prompt=prompt,
                         system=system, raw=raw, context=tuple(context), keep_alive_zero=_keep_alive_zero(body),
                         think=think_from_ollama(body.get("think")))
