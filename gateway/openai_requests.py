"""Validation of /v1/completions and /v1/chat/completions bodies into frozen request objects.

Strict by default (unknown field → 400 naming it); lenient mode ignores unknown fields and
reports their names so the caller can log them. Model-dependent checks (vocabulary range of
token ids and logit_bias keys, context length) happen later, once the model is known.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gateway.errors import invalid, safe_repr
from gateway.fields import get_bool, get_float, get_int, get_object, get_str, require_default
from gateway.logprobs import chat_top_logprobs, completion_echo, completion_logprobs
from gateway.reasoning import think_from_openai

MAX_STOP_STRINGS = 4
MAX_STOP_CHARS = 256
MAX_LOGIT_BIAS = 1024
MAX_PROMPTS = 64
MAX_TOKEN_ID = (1 << 31) - 1
MAX_MESSAGES = 1024
MAX_TOKENS_LIMIT = 1 << 20
SEED_MAX = (1 << 64) - 1
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's legacy completions default; chat fills the context
CHAT_ROLES = ("system", "developer", "user", "assistant")

_COMMON = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "n", "stop",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "ignore_eos",
    "min_tokens", "stream", "stream_options", "user", "logprobs",
}
COMPLETION_FIELDS = frozenset(_COMMON | {"prompt", "echo", "suffix", "best_of"})
CHAT_FIELDS = frozenset(_COMMON | {
    "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
    "parallel_tool_calls", "response_format", "chat_template_kwargs", "enable_thinking",
    "reasoning_effort",
})
# reasoning_content (vLLM, llama-server, DeepSeek), reasoning (OpenRouter, vLLM), thinking (Ollama):
# accepted on assistant messages and never rendered into the prompt again.
_MESSAGE_FIELDS = frozenset({"role", "content", "name", "reasoning_content", "reasoning", "thinking", "tool_calls"})


@dataclass(frozen=True)
class Sampling:
    model: str
    max_tokens: int | None  # None: fill the remaining context
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0
    logprobs: int | None = None  # alternatives per scored token (gateway.logprobs); None: off


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


def _check_fields(body: dict, known: frozenset, lenient: bool) -> tuple[str, ...]:
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
    unknown = [k for k in options if k not in ("include_usage", "continuous_usage_stats")]
    if unknown:
        raise invalid("'stream_options' accepts only 'include_usage'", param="stream_options", code="unknown_parameter")
    require_default(options, "continuous_usage_stats", (False,), "per-chunk usage")
    return get_bool(options, "include_usage", False)


def _seed(body: dict) -> int | None:
    seed = get_int(body, "seed", None, -1, SEED_MAX)
    return None if seed == -1 else seed  # -1 = random, as llama.cpp clients send it


def _sampling(body: dict, max_tokens: int | None, logprobs: int | None) -> Sampling:
    stream = get_bool(body, "stream", False)
    top_k = get_int(body, "top_k", 0, -1, MAX_TOKEN_ID)
    sampling = Sampling(
        model=_model(body),
        max_tokens=max_tokens,
        n=get_int(body, "n", 1, 1, 1 << 30),  # the configured cap is applied by the caller
        stream=stream,
        include_usage=_stream_options(body, stream),
        temperature=get_float(body, "temperature", 1.0, 0.0, 2.0),
        top_p=get_float(body, "top_p", 1.0, 0.0, 1.0),
        top_k=max(top_k, 0),  # vLLM clients send -1 for "off"
        min_p=get_float(body, "min_p", 0.0, 0.0, 1.0),
        seed=_seed(body),
        stop=_stop(body),
        presence_penalty=get_float(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=get_float(body, "frequency_penalty", 0.0, -2.0, 2.0),
        repetition_penalty=get_float(body, "repetition_penalty", 1.0, 0.0, 10.0, lo_open=True),
        logit_bias=_logit_bias(body),
        ignore_eos=get_bool(body, "ignore_eos", False),
        min_tokens=get_int(body, "min_tokens", 0, 0, MAX_TOKENS_LIMIT),
        logprobs=logprobs,
    )
    if max_tokens is not None and sampling.min_tokens > max_tokens:
        raise invalid("'min_tokens' must not exceed 'max_tokens'", param="min_tokens")
    get_str(body, "user", None, 256)
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
    ignored = _check_fields(body, COMPLETION_FIELDS, lenient)
    require_default(body, "suffix", ("",), "suffix/insertion")
    max_tokens = get_int(body, "max_tokens", COMPLETIONS_DEFAULT_MAX_TOKENS, 0, MAX_TOKENS_LIMIT)
    echo = completion_echo(body, max_tokens)
    sampling = _sampling(body, max_tokens, completion_logprobs(body))
    require_default(body, "best_of", (1, sampling.n), "best_of other than n")
    return CompletionRequest(sampling=sampling, prompts=_prompts(body), ignored_fields=ignored, echo=echo)


def _message_content(message: dict, index: int) -> str:
    param = f"messages[{index}].content"
    content = message.get("content")
    if content is None:
        return ""  # assistant turns may carry only tool calls; we render them empty
    if type(content) is str:
        return content
    if type(content) is not list:
        raise invalid("message content must be a string or an array of text parts", param=param, code="invalid_type")
    texts = []
    for part in content:
        if type(part) is not dict or part.get("type") != "text" or type(part.get("text")) is not str:
            raise invalid("only text content parts are supported", param=param, code="unsupported_parameter")
        texts.append(part["text"])
    return "".join(texts)


def parse_messages(body: dict, lenient: bool) -> tuple[dict, ...]:
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
        role = message.get("role")
        if role not in CHAT_ROLES:
            raise invalid(f"message role must be one of {', '.join(CHAT_ROLES)}", param=f"messages[{i}].role")
        if message.get("tool_calls"):
            raise invalid("tool calls are not supported", param=f"messages[{i}].tool_calls",
                          code="unsupported_parameter")
        if message.get("name") is not None and type(message["name"]) is not str:
            raise invalid("message name must be a string", param=f"messages[{i}].name", code="invalid_type")
        # "developer" is OpenAI's newer name for the system turn; templates know only "system".
        # reasoning_content / reasoning / thinking are dropped: never fed back into the prompt.
        out.append({"role": "system" if role == "developer" else role, "content": _message_content(message, i)})
    return tuple(out)


def template_kwargs(body: dict) -> dict:
    kwargs = dict(get_object(body, "chat_template_kwargs") or {})
    thinking = get_bool(body, "enable_thinking", None) if body.get("enable_thinking") is not None else None
    if thinking is not None:
        if "enable_thinking" in kwargs and kwargs["enable_thinking"] != thinking:
            raise invalid("'enable_thinking' conflicts with chat_template_kwargs.enable_thinking",
                          param="enable_thinking")
        kwargs["enable_thinking"] = thinking
    return kwargs


def parse_chat(body: dict, *, lenient: bool) -> ChatRequest:
    ignored = _check_fields(body, CHAT_FIELDS, lenient)
    legacy = get_int(body, "max_tokens", None, 1, MAX_TOKENS_LIMIT)
    # If both are sent, max_completion_tokens wins (llama.cpp); never ignore either (Ollama #7125).
    max_tokens = get_int(body, "max_completion_tokens", legacy, 1, MAX_TOKENS_LIMIT)
    sampling = _sampling(body, max_tokens, chat_top_logprobs(body))
    if body.get("tools"):
        raise invalid("'tools' is not supported by this server", param="tools", code="unsupported_parameter")
    require_default(body, "tool_choice", ("none", "auto"), "tool calling")
    get_bool(body, "parallel_tool_calls", True)
    response_format = get_object(body, "response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise invalid("only response_format {\"type\": \"text\"} is supported", param="response_format",
                      code="unsupported_parameter")
    kwargs = template_kwargs(body)
    return ChatRequest(
        sampling=sampling,
        messages=parse_messages(body, lenient),
        template_kwargs=kwargs,
        ignored_fields=ignored,
        think=think_from_openai(kwargs.get("enable_thinking"), body.get("reasoning_effort")),
        think_param="enable_thinking" if kwargs.get("enable_thinking") is not None else "reasoning_effort",
    )
