"""Schemathesis hooks for benchmarks/schemathesis_run.py (loaded through SCHEMATHESIS_HOOKS).

They steer generated bodies at the served model and keep generations short, without turning an
invalid body into a valid one (the negative-data check relies on that): a non-empty model name
becomes the served one; a length that is already valid is lowered, never moved out of its range;
a missing length is added as a valid small one. Everything else is left as generated.
"""
from __future__ import annotations

import os

import schemathesis

MODEL = os.environ.get("LANESERVE_FUZZ_MODEL", "smollm2")
MAX_GENERATED = 4  # tokens per choice: SmolLM2 on one thread makes ~40 tokens/s
MAX_N = 2
_LENGTHS = ("max_tokens", "max_completion_tokens", "min_tokens")
_LIMIT = 1 << 20  # gateway.http.limits.MAX_TOKENS_LIMIT


def _is_int(value) -> bool:
    return type(value) is int


def _openai(body: dict) -> None:
    for key in _LENGTHS:
        value = body.get(key)
        if _is_int(value) and MAX_GENERATED < value <= _LIMIT:
            body[key] = MAX_GENERATED if key != "min_tokens" else 0
    if body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
        body["max_tokens"] = MAX_GENERATED  # chat would otherwise fill the context
    n = body.get("n")
    if _is_int(n) and MAX_N < n <= 1 << 30:
        body["n"] = MAX_N


def _ollama(body: dict) -> None:
    options = body.get("options")
    if options is None:
        body["options"] = {"num_predict": MAX_GENERATED}
    elif type(options) is dict:
        value = options.get("num_predict")
        if value is None:
            options["num_predict"] = MAX_GENERATED
        elif _is_int(value) and value != 0 and -2 <= value <= _LIMIT:
            options["num_predict"] = MAX_GENERATED


@schemathesis.hook
def map_body(context, body):
    if type(body) is not dict:
        return body
    for key in ("model", "name"):
        # Only names every schema accepts (1..64 characters), so no invalid name becomes valid.
        if type(body.get(key)) is str and 0 < len(body[key]) <= 64:
            body[key] = MODEL
    path = context.operation.path if context.operation is not None else ""
    if path in ("/v1/completions", "/v1/chat/completions"):
        _openai(body)
    elif path in ("/api/chat", "/api/generate"):
        _ollama(body)
    return body
