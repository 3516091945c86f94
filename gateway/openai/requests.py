"""Validation of /v1/completions and /v1/chat/completions bodies into frozen request objects.

Strict by default (unknown field → 400 naming it); lenient mode ignores unknown fields and
reports their names so the caller can log them. Model-dependent checks (vocabulary range of
token ids and logit_bias keys, context length) happen later, once the model is known.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from gateway.http.errors import APIError, invalid, safe_repr
from gateway.http.fields import (Bool, Custom, Float, Int, NoOp, Obj, Str, get_bool, get_object, object_schema,
                            require_default, table)
from gateway.http.limits import MAX_MESSAGES, MAX_TOKENS_LIMIT, SEED_MAX
from gateway.openai.logprobs import (MAX_CHAT_TOP_LOGPROBS, MAX_COMPLETION_LOGPROBS, chat_top_logprobs, completion_echo,
                              completion_logprobs)
from gateway.features.reasoning import EFFORTS, effort_kwargs, think_from_openai
from gateway.features.structured import SCHEMA_SHAPES as STRUCTURED_SHAPES
from gateway.features.structured import from_openai as structured_from_openai
from gateway.features.tools import TOOL_SHAPES, Tools, parse_tools
from gateway.lora.selection import LORA_SHAPE, parse_request_lora
from gateway.openai.messages import CHAT_ROLES, message_schema, message_shape, parse_messages  # noqa: F401
from lanes.api import GenerationParams, param_default

MAX_STOP_STRINGS = 4
MAX_STOP_CHARS = 256
MAX_LOGIT_BIAS = 1024
MAX_PROMPTS = 64
MAX_TOKEN_ID = (1 << 31) - 1
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's legacy completions default; chat fills the context


# The lanes.api.GenerationParams fields an OpenAI request sets (names, types and defaults are
# GenerationParams'; gateway.serve.lanes.generation_params copies them over by name). grammar:
# gateway.features.structured; logprobs: alternatives per scored token (gateway.openai.logprobs).
SAMPLING_PARAMS = ("temperature", "top_p", "top_k", "min_p", "seed", "stop", "presence_penalty", "frequency_penalty",
                   "repetition_penalty", "logit_bias", "ignore_eos", "min_tokens", "grammar", "logprobs")
# A request's sampling: its own request-level fields, then the GenerationParams fields above.
Sampling = dataclasses.make_dataclass("Sampling", [
    ("model", "str"),
    ("max_tokens", "int | None"),  # None: fill the remaining context
    ("n", "int", field(default=1)),
    ("stream", "bool", field(default=False)),
    ("include_usage", "bool", field(default=False)),
    ("grammar_param", "str | None", field(default=None)),  # the field that asked for a grammar
    *((f.name, f.type, field(default=f.default)) for f in dataclasses.fields(GenerationParams)
      if f.name in SAMPLING_PARAMS),
], frozen=True)
Sampling.__module__ = __name__


@dataclass(frozen=True)
class CompletionRequest:
    sampling: Sampling
    prompts: tuple[str | tuple[int, ...], ...]  # one choice group per prompt
    ignored_fields: tuple[str, ...] = ()
    echo: bool = False  # the prompt comes back before the completion (scored, with logprobs)


@dataclass(frozen=True)
class ChatRequest:
    sampling: Sampling
    messages: tuple[dict, ...]  # normalised: {"role": str, "content": str}
    template_kwargs: dict = field(default_factory=dict)
    ignored_fields: tuple[str, ...] = ()
    think: bool | None = None  # enable_thinking / reasoning_effort; None: the model's default
    think_param: str = "enable_thinking"  # the field that asked (named by a 400)
    tools: Tools | None = None  # gateway.features.tools; None: no tools in the request
    images: tuple = ()  # gateway.vision.parts.RequestImage per image_url part, in message order


def check_fields(body: dict, known: frozenset, lenient: bool) -> tuple[str, ...]:
    unknown = sorted(k for k in body if k not in known)
    if unknown and not lenient:
        name = unknown[0]
        raise invalid(f"Unrecognized request argument supplied: {safe_repr(name)}", param=safe_repr(name).strip("'"),
                      code="unknown_parameter")
    return tuple(safe_repr(k).strip("'") for k in unknown)


def _model(body: dict) -> str:
    value = body.get("model")
    if value is None:
        raise invalid("'model' is required", param="model", code="missing_required_parameter")
    if type(value) is not str:
        raise invalid("'model' must be a string", param="model", code="invalid_type")
    return value


def _stop(body: dict) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    items = [value] if type(value) is str else value
    if type(items) is not list or any(type(s) is not str for s in items):
        raise invalid("'stop' must be a string or an array of strings", param="stop", code="invalid_type")
    if len(items) > MAX_STOP_STRINGS:
        raise invalid(f"'stop' accepts at most {MAX_STOP_STRINGS} strings", param="stop")
    for s in items:
        if not s or len(s) > MAX_STOP_CHARS:
            raise invalid(f"each stop string must have 1 to {MAX_STOP_CHARS} characters", param="stop")
    return tuple(dict.fromkeys(items))


def _logit_bias(body: dict) -> tuple[tuple[int, float], ...]:
    value = get_object(body, "logit_bias")
    if not value:
        return ()
    if len(value) > MAX_LOGIT_BIAS:
        raise invalid(f"'logit_bias' accepts at most {MAX_LOGIT_BIAS} entries", param="logit_bias")
    out = []
    for key, bias in value.items():
        if not (key.isascii() and key.isdigit()) or len(key) > 10 or int(key) > MAX_TOKEN_ID:
            raise invalid("'logit_bias' keys must be token ids (decimal strings)", param="logit_bias")
        if type(bias) not in (int, float) or not -100.0 <= bias <= 100.0:
            raise invalid("'logit_bias' values must be numbers in [-100, 100]", param="logit_bias")
        out.append((int(key), float(bias)))
    return tuple(sorted(out))


def _stream_options(body: dict, stream: bool) -> bool:
    options = get_object(body, "stream_options")
    if options is None:
        return False
    if not stream:
        raise invalid("'stream_options' is only allowed when 'stream' is true", param="stream_options")
    unknown = [k for k in options if k not in _STREAM_OPTION_FIELDS]
    if unknown:
        raise invalid("'stream_options' accepts only 'include_usage'", param="stream_options", code="unknown_parameter")
    try:
        _STREAM_OPTION_FIELDS["continuous_usage_stats"].read(options)
    except APIError as exc:
        exc.param = "stream_options"  # the body field a client can find
        raise
    return _STREAM_OPTION_FIELDS["include_usage"].read(options)


def _seed(body: dict) -> int | None:
    seed = _SEED.read(body)
    return None if seed == -1 else seed  # -1 = random, as llama.cpp clients send it


def _sampling(body: dict, max_tokens: int | None, logprobs: int | None) -> Sampling:
    f = COMMON_FIELDS
    stream = f["stream"].read(body)
    sampling = Sampling(
        model=f["model"].read(body),
        max_tokens=max_tokens,
        n=f["n"].read(body),  # the configured cap is applied by the caller
        stream=stream,
        include_usage=_stream_options(body, stream),
        temperature=f["temperature"].read(body),
        top_p=f["top_p"].read(body),
        top_k=max(f["top_k"].read(body), 0),  # vLLM clients send -1 for "off"
        min_p=f["min_p"].read(body),
        seed=f["seed"].read(body),
        stop=f["stop"].read(body),
        presence_penalty=f["presence_penalty"].read(body),
        frequency_penalty=f["frequency_penalty"].read(body),
        repetition_penalty=f["repetition_penalty"].read(body),
        logit_bias=f["logit_bias"].read(body),
        ignore_eos=f["ignore_eos"].read(body),
        min_tokens=f["min_tokens"].read(body),
        logprobs=logprobs,
        **dict(zip(("grammar", "grammar_param"), structured_from_openai(body))),
    )
    if max_tokens is not None and sampling.min_tokens > max_tokens:
        raise invalid("'min_tokens' must not exceed 'max_tokens'", param="min_tokens")
    for name in ("user", *(h.name for h in _HOSTED_FIELDS)):
        f[name].read(body)
    return sampling


def _token_ids(value: list, param: str) -> tuple[int, ...]:
    for token in value:
        if type(token) is not int or not 0 <= token <= MAX_TOKEN_ID:
            raise invalid("token-id prompts must contain non-negative integers", param=param, code="invalid_type")
    return tuple(value)


def _prompts(body: dict) -> tuple[str | tuple[int, ...], ...]:
    value = body.get("prompt")
    if value is None:
        raise invalid("'prompt' is required", param="prompt", code="missing_required_parameter")
    if type(value) is str:
        return (value,)
    if type(value) is not list or not value:
        raise invalid("'prompt' must be a string, an array of strings, or token ids", param="prompt",
                      code="invalid_type")
    if all(type(v) is str for v in value):
        prompts: tuple = tuple(value)
    elif all(type(v) is int for v in value):
        prompts = (_token_ids(value, "prompt"),)
    elif all(type(v) is list for v in value):
        prompts = tuple(_token_ids(v, "prompt") for v in value)
    else:
        raise invalid("'prompt' mixes strings, token ids and arrays", param="prompt", code="invalid_type")
    if len(prompts) > MAX_PROMPTS:
        raise invalid(f"'prompt' accepts at most {MAX_PROMPTS} prompts", param="prompt")
    return prompts


def parse_completion(body: dict, *, lenient: bool) -> CompletionRequest:
    ignored = check_fields(body, COMPLETION_FIELDS, lenient)
    f = COMPLETION_FIELDS
    f["suffix"].read(body)
    max_tokens = f["max_tokens"].read(body, COMPLETIONS_DEFAULT_MAX_TOKENS)
    echo = completion_echo(body, max_tokens)
    sampling = _sampling(body, max_tokens, completion_logprobs(body))
    require_default(body, "best_of", (1, sampling.n), "best_of other than n")
    return CompletionRequest(sampling=sampling, prompts=f["prompt"].read(body), ignored_fields=ignored, echo=echo)



def template_kwargs(body: dict) -> dict:
    kwargs = dict(get_object(body, "chat_template_kwargs") or {})
    thinking = get_bool(body, "enable_thinking", None)
    if thinking is not None:
        if "enable_thinking" in kwargs and kwargs["enable_thinking"] != thinking:
            raise invalid("'enable_thinking' conflicts with chat_template_kwargs.enable_thinking",
                          param="enable_thinking")
        kwargs["enable_thinking"] = thinking
    return kwargs


def parse_chat(body: dict, *, lenient: bool) -> ChatRequest:
    ignored = check_fields(body, CHAT_FIELDS, lenient)
    f = CHAT_FIELDS
    legacy = f["max_tokens"].read(body)
    # If both are sent, max_completion_tokens wins (llama.cpp); never ignore either (Ollama #7125).
    sampling = _sampling(body, f["max_completion_tokens"].read(body, legacy), chat_top_logprobs(body))
    tools = parse_tools(body)
    if tools is not None and tools.active and sampling.grammar is not None:
        raise invalid(f"'{sampling.grammar_param}' cannot be combined with tool calls; send tool_choice 'none'",
                      param=sampling.grammar_param)
    if tools is not None and tools.active and sampling.logprobs is not None:
        raise invalid("'logprobs' cannot be combined with tool calls", param="logprobs", code="unsupported_parameter")
    kwargs = template_kwargs(body)
    think = think_from_openai(kwargs.get("enable_thinking"), body.get("reasoning_effort"))
    kwargs = {**effort_kwargs(body.get("reasoning_effort")), **kwargs}
    images: list = []
    messages = parse_messages(body, lenient, images)
    return ChatRequest(
        sampling=sampling,
        messages=messages,
        images=tuple(images),
        template_kwargs=kwargs,
        ignored_fields=ignored,
        think=think,
        think_param="enable_thinking" if kwargs.get("enable_thinking") is not None else "reasoning_effort",
        tools=tools,
    )


# --- The field tables: the parsers above read through them; gateway/server/openapi.py renders them ------

_STOP_STRING = {"type": "string", "minLength": 1, "maxLength": MAX_STOP_CHARS}
_TOKEN_ID = {"type": "integer", "minimum": 0, "maximum": MAX_TOKEN_ID}
_STREAM_OPTION_FIELDS = table(
    Bool("include_usage", "send a final chunk with `usage` (and `choices: []`)", default=False),
    NoOp("continuous_usage_stats", allowed=(False,), what="per-chunk usage"),
)
_SEED = Int("seed", "sampling seed; -1 = random", lo=-1, hi=SEED_MAX)
_HOSTED_FIELDS = (
    NoOp("store", allowed=(False,), what="stored completions"),
    Obj("metadata", "accepted and ignored (completions are not stored)"),
    NoOp("service_tier", allowed=("auto", "default"), what="service tiers"),
    Str("safety_identifier", max_chars=256),
    Str("prompt_cache_key", "accepted; every prompt's prefix is cached anyway", max_chars=256),
)
COMMON_FIELDS = table(
    Custom("model", "a served model name (GET /v1/models)", reader=_model, shape={"type": "string"}),
    Int("max_tokens", "most tokens to generate (capped by the context)", lo=1, hi=MAX_TOKENS_LIMIT),
    Float("temperature", default=param_default("temperature"), lo=0.0, hi=2.0),
    Float("top_p", "0 = only the most likely token", default=param_default("top_p"), lo=0.0, hi=1.0),
    Int("top_k", "0 or -1 = off", default=param_default("top_k"), lo=-1, hi=MAX_TOKEN_ID),
    Float("min_p", default=param_default("min_p"), lo=0.0, hi=1.0),
    Custom("seed", _SEED.doc, reader=_seed, shape=_SEED.json_schema()),
    Int("n", "choices per prompt (the server's --max-n caps it)", default=1, lo=1, hi=1 << 30),
    Custom("stop", f"up to {MAX_STOP_STRINGS} stop strings", reader=_stop, shape={"anyOf": [
        _STOP_STRING, {"type": "array", "items": _STOP_STRING, "maxItems": MAX_STOP_STRINGS}, {"type": "null"}]}),
    Float("presence_penalty", default=param_default("presence_penalty"), lo=-2.0, hi=2.0),
    Float("frequency_penalty", default=param_default("frequency_penalty"), lo=-2.0, hi=2.0),
    Float("repetition_penalty", default=param_default("repetition_penalty"), lo=0.0, hi=10.0, lo_open=True),
    Custom("logit_bias", "token id (decimal string) → bias", reader=_logit_bias, shape={
        "type": ["object", "null"], "maxProperties": MAX_LOGIT_BIAS, "propertyNames": {"pattern": "^[0-9]{1,10}$"},
        "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}}),
    Bool("ignore_eos", default=param_default("ignore_eos")),
    Int("min_tokens", default=param_default("min_tokens"), lo=0, hi=MAX_TOKENS_LIMIT),
    Bool("stream", default=False),
    Custom("stream_options", "only with stream: true", reader=lambda body: None, shape={
        **object_schema(_STREAM_OPTION_FIELDS), "type": ["object", "null"]}),
    Str("user", max_chars=256),
    # Fields the openai client sends for OpenAI's hosted features: accepted with their no-op values.
    *_HOSTED_FIELDS,
    Custom("lora", "llama-server's per-request LoRA scales [{\"id\", \"scale\"}] (GET /lora-adapters lists the ids; "
           "ids left out: scale 0)", reader=lambda body: parse_request_lora(body.get("lora")), shape=LORA_SHAPE),
    # Structured outputs (gateway.features.structured reads them all at once in _sampling).
    *(Custom(name, doc, reader=lambda body: None, shape=shape) for name, (doc, shape) in STRUCTURED_SHAPES.items()),
)


def _prompts_shape() -> dict:
    strings = {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_PROMPTS}
    ids = {"type": "array", "items": _TOKEN_ID, "minItems": 1}
    nested = {"type": "array", "items": {"type": "array", "items": _TOKEN_ID}, "minItems": 1, "maxItems": MAX_PROMPTS}
    return {"anyOf": [{"type": "string"}, strings, ids, nested]}


COMPLETION_FIELDS = table(
    *COMMON_FIELDS.values(),
    Custom("prompt", "a string, strings (one choice group each), token ids, or arrays of token ids",
           reader=_prompts, shape=_prompts_shape()),
    Int("max_tokens", "most tokens to generate (capped by the context); 0 only with echo: score the prompt",
        lo=0, hi=MAX_TOKENS_LIMIT),
    Bool("echo", "return the prompt, scored, before the completion", default=False),
    Int("logprobs", "alternatives per token in `logprobs` (off when null)", lo=0, hi=MAX_COMPLETION_LOGPROBS),
    NoOp("suffix", allowed=("",), what="suffix/insertion"),
    Custom("best_of", "only 1 or n", reader=lambda body: None, shape={"type": ["integer", "null"]}),
)
COMPLETION_REQUIRED = ("model", "prompt")



CHAT_FIELDS = table(
    *COMMON_FIELDS.values(),
    Custom("messages", "system/developer, user and assistant turns; text parts, and image_url parts (data: URIs) "
           "for a model served with --mmproj",
           reader=lambda body: None, shape={"type": "array", "items": message_shape(), "minItems": 1,
                                            "maxItems": MAX_MESSAGES}),
    Int("max_completion_tokens", "wins over max_tokens", lo=1, hi=MAX_TOKENS_LIMIT),
    Bool("logprobs", "return each token's log-probability", default=False),
    Int("top_logprobs", "alternatives per token (needs logprobs: true)", lo=0, hi=MAX_CHAT_TOP_LOGPROBS),
    # Tools (gateway.features.tools.parse_tools reads them together).
    *(Custom(name, doc, reader=lambda body: None, shape=shape) for name, (doc, shape) in TOOL_SHAPES.items()),
    Obj("chat_template_kwargs", "extra variables for the chat template, e.g. enable_thinking"),
    Bool("enable_thinking"),
    Custom("reasoning_effort", "\"none\" turns thinking off, any other level on", reader=lambda body: None,
           shape={"enum": [*EFFORTS, None]}),
)
CHAT_REQUIRED = ("model", "messages")
