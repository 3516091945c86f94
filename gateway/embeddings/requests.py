"""Embedding requests: parsing, validation and response bodies for OpenAI `POST /v1/embeddings`
and Ollama `POST /api/embed` / legacy `POST /api/embeddings` (the handlers are in
gateway/embeddings/requests/routes.py).

An embedding is the mean of the model's final hidden states (after the output norm) over the
input's tokens, L2-normalised, computed in the lane (lanes.wire REQUEST_EMBED). Vectors travel as
float32 little-endian bytes `[n_embd]`; `dimensions` keeps the first d values and re-normalises
them (OpenAI's text-embedding-3 semantics). Pure functions: no lanes, no event loop.
"""
from __future__ import annotations

import base64
import math
import sys
from array import array
from dataclasses import dataclass

from gateway.http.errors import APIError, invalid, safe_repr

MAX_INPUTS = 256            # inputs per HTTP request (OpenAI allows 2048; a lane request carries 128)
ENCODING_FORMATS = ("float", "base64")
CONTEXT_EXCEEDED_OLLAMA = "the input length exceeds the context length"  # Ollama's own message


_TEXT = {"type": "string", "minLength": 1}
_IDS = {"type": "array", "items": {"type": "integer"}, "minItems": 1}
_DIMENSIONS = {"type": ["integer", "null"], "minimum": 1, "description": "keep the first d values, re-normalised"}
# JSON Schema of what the parsers below accept (gateway/server/openapi.py renders it); keep each shape in
# step with its reader here.
OPENAI_FIELDS = {
    "model": {"type": "string"},
    "input": {"anyOf": [_TEXT, {"type": "array", "items": _TEXT, "minItems": 1, "maxItems": MAX_INPUTS}, _IDS,
                        {"type": "array", "items": _IDS, "minItems": 1, "maxItems": MAX_INPUTS}]},
    "encoding_format": {"enum": [*ENCODING_FORMATS, None]},
    "dimensions": _DIMENSIONS,
    "user": {"type": ["string", "null"]},
}
OPENAI_REQUIRED = ("model", "input")
OLLAMA_EMBED_FIELDS = {
    "model": {"type": "string", "minLength": 1},
    "input": {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT, "maxItems": MAX_INPUTS},
                        {"type": "null"}]},
    "truncate": {"type": ["boolean", "null"], "description": "cut inputs to the context (default true)"},
    "dimensions": _DIMENSIONS,
    "options": {"type": ["object", "null"]},
    "keep_alive": {},
}
OLLAMA_LEGACY_FIELDS = {"model": OLLAMA_EMBED_FIELDS["model"], "prompt": {"type": ["string", "null"]},
                        "options": OLLAMA_EMBED_FIELDS["options"], "keep_alive": {}}


@dataclass(frozen=True)
class EmbedRequest:
    """A validated request: the model name, each input as text or token ids, output options."""
    model: str
    inputs: tuple[str | tuple[int, ...], ...]
    encoding_format: str = "float"
    dimensions: int | None = None
    truncate: bool = False      # Ollama: cut inputs to the context instead of refusing them
    ignored_fields: tuple[str, ...] = ()


def _is_token_list(value) -> bool:
    return type(value) is list and all(type(t) is int for t in value)


def _dimensions(body: dict) -> int | None:
    value = body.get("dimensions")
    if value is None:
        return None
    if type(value) is not int:
        raise invalid("'dimensions' must be an integer", param="dimensions", code="invalid_type")
    if value < 1:
        raise invalid("'dimensions' must be at least 1", param="dimensions")
    return value


def _check_count(n: int, param: str) -> None:
    if n == 0:
        raise invalid(f"'{param}' must not be empty", param=param)
    if n > MAX_INPUTS:
        raise invalid(f"'{param}' holds {n} inputs; at most {MAX_INPUTS} per request", param=param)


def parse_openai(body: dict, *, lenient: bool) -> EmbedRequest:
    """OpenAI fields; unknown ones → 400 unless lenient (then listed in ignored_fields)."""
    unknown = sorted(k for k in body if k not in OPENAI_FIELDS)
    if unknown and not lenient:
        raise invalid(f"Unrecognized request argument supplied: {safe_repr(unknown[0])}",
                      param=safe_repr(unknown[0]).strip("'"), code="unknown_parameter")
    model = body.get("model")
    if model is None:
        raise invalid("you must provide a model parameter", param="model", code="missing_required_parameter")
    if type(model) is not str:
        raise invalid("'model' must be a string", param="model", code="invalid_type")
    raw = body.get("input")
    if raw is None:
        raise invalid("'input' is required", param="input", code="missing_required_parameter")
    if type(raw) is str:
        inputs: list = [raw]
    elif type(raw) is list:
        if raw and all(type(x) is str for x in raw):
            inputs = list(raw)
        elif raw and _is_token_list(raw):
            inputs = [tuple(raw)]
        elif raw and all(_is_token_list(x) for x in raw):
            inputs = [tuple(x) for x in raw]
        elif not raw:
            inputs = []
        else:
            raise invalid("'input' must be a string, an array of strings, an array of token ids or an array "
                          "of token-id arrays", param="input", code="invalid_type")
    else:
        raise invalid("'input' must be a string or an array", param="input", code="invalid_type")
    _check_count(len(inputs), "input")
    for x in inputs:
        if len(x) == 0:
            raise invalid("'input' must not contain empty strings or empty token arrays", param="input")
    fmt = body.get("encoding_format")
    if fmt is None:
        fmt = "float"
    if fmt not in ENCODING_FORMATS:
        raise invalid("'encoding_format' must be 'float' or 'base64'", param="encoding_format")
    user = body.get("user")
    if user is not None and type(user) is not str:
        raise invalid("'user' must be a string", param="user", code="invalid_type")
    return EmbedRequest(model, tuple(inputs), fmt, _dimensions(body), False, tuple(unknown))


def parse_ollama(body: dict, *, legacy: bool) -> EmbedRequest:
    """Ollama `/api/embed` (`input`: string or strings, `truncate`, `dimensions`) or legacy
    `/api/embeddings` (`prompt`). Unknown fields are ignored, as Ollama does; `options` and
    `keep_alive` are accepted (a lane keeps its model loaded). Empty input → no inputs (Ollama
    answers those with an empty result)."""
    model = body.get("model")
    if model is None or model == "":
        raise invalid("model is required", param="model")
    if type(model) is not str:
        raise invalid("invalid model name", param="model", code="invalid_type")
    if body.get("options") is not None and type(body["options"]) is not dict:
        raise invalid("options must be an object", param="options", code="invalid_type")
    if legacy:
        prompt = body.get("prompt")
        if prompt is not None and type(prompt) is not str:
            raise invalid("prompt must be a string", param="prompt", code="invalid_type")
        return EmbedRequest(model, (prompt,) if prompt else (), truncate=True)
    raw = body.get("input")
    if raw is None or raw == "":
        inputs: list = []
    elif type(raw) is str:
        inputs = [raw]
    elif type(raw) is list and all(type(x) is str for x in raw):
        inputs = list(raw)
    else:
        raise invalid("invalid input type", param="input", code="invalid_type")
    if len(inputs) > MAX_INPUTS:
        raise invalid(f"at most {MAX_INPUTS} inputs per request", param="input")
    if any(x == "" for x in inputs):
        raise invalid("input must not contain empty strings", param="input")
    truncate = body.get("truncate")
    if truncate is not None and type(truncate) is not bool:
        raise invalid("truncate must be true or false", param="truncate", code="invalid_type")
    return EmbedRequest(model, tuple(inputs), dimensions=_dimensions(body),
                        truncate=True if truncate is None else truncate)


def token_inputs(req: EmbedRequest, text, n_ctx: int, *, ollama: bool) -> list[list[int]]:
    """Tokenize (`text` is a gateway.text.model_text.ModelText) and check against the context:
    too long → truncated (Ollama, truncate true) or 400 (OpenAI `context_length_exceeded`,
    Ollama's own message)."""
    out = []
    for x in req.inputs:
        if isinstance(x, str):
            ids = text.encode_prompt(x)
        else:
            text.check_token_ids(x, "input")
            ids = list(x)
        if not ids:
            raise invalid("an input is empty after tokenization", param="input")
        if len(ids) > n_ctx:
            if req.truncate:
                ids = ids[:n_ctx]
            elif ollama:
                raise invalid(CONTEXT_EXCEEDED_OLLAMA, param="input")
            else:
                raise APIError(400, f"an input has {len(ids)} tokens; this model's context is {n_ctx} tokens",
                               param="input", code="context_length_exceeded")
        out.append(ids)
    return out


def check_dimensions(req: EmbedRequest, n_embd: int) -> None:
    if req.dimensions is not None and req.dimensions > n_embd:
        raise invalid(f"'dimensions' ({req.dimensions}) exceeds this model's embedding size ({n_embd})",
                      param="dimensions")


def shaped(vector: bytes, dimensions: int | None) -> array:
    """float32 [n_embd] bytes → array('f'): all of it, or the first `dimensions` values
    re-normalised to L2 norm 1 (in double, rounded once to float32)."""
    v = array("f")
    v.frombytes(vector)
    if dimensions is None or dimensions >= len(v):
        return v
    head = v[:dimensions]
    norm = math.sqrt(math.fsum(float(x) * float(x) for x in head))
    return array("f", (float(x) / norm for x in head)) if norm > 0 else head


def _b64(v: array) -> str:
    """OpenAI's base64 form: the float32 values as little-endian bytes."""
    if sys.byteorder != "little":
        v = array("f", v)
        v.byteswap()
    return base64.b64encode(v.tobytes()).decode("ascii")


def openai_body(model: str, vectors: list[array], encoding_format: str, prompt_tokens: int) -> dict:
    data = [{"object": "embedding", "index": i,
             "embedding": _b64(v) if encoding_format == "base64" else v.tolist()}
            for i, v in enumerate(vectors)]
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}


def ollama_embed_body(model: str, vectors: list[array], prompt_tokens: int, total_ns: int) -> dict:
    return {"model": model, "embeddings": [v.tolist() for v in vectors], "total_duration": total_ns,
            "load_duration": 0, "prompt_eval_count": prompt_tokens}


def ollama_legacy_body(vectors: list[array]) -> dict:
    return {"embedding": vectors[0].tolist() if vectors else []}


def pack_groups(inputs: list[list[int]], token_budget: int, max_per_group: int) -> list[tuple[int, list[list[int]]]]:
    """Consecutive inputs → lane requests of ≤ max_per_group inputs and ≤ token_budget tokens
    (an input alone may use the whole budget): [(index of the group's first input, inputs)]."""
    groups: list[tuple[int, list[list[int]]]] = []
    current: list[list[int]] = []
    start = tokens = 0
    for i, ids in enumerate(inputs):
        if current and (len(current) == max_per_group or tokens + len(ids) > token_budget):
            groups.append((start, current))
            current, start, tokens = [], i, 0
        current.append(ids)
        tokens += len(ids)
    if current:
        groups.append((start, current))
    return groups
