"""The chaos benchmark's request mix and its one check: every answer is exactly one well-formed
terminal outcome in its protocol's shape.

Each kind is a (path, body, stream) maker; `check` reads the raw answer (status, headers, body
bytes as the client got them) and returns (outcome, text) or raises Violation. Outcomes:
"ok" (the protocol's normal end), "error" (its error shape: an HTTP error body, or an in-band
error event that ends the stream), "refused" (429 with Retry-After). `text` is the generated
text of a completed seeded chat stream, for the replay comparison.
"""
from __future__ import annotations

import random

import orjson

MAX_TOKENS = 24
_WORDS = "river stone lamp garden winter paper violin harbor lantern meadow copper signal".split()
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


class Violation(Exception):
    """An answer that is not exactly one well-formed terminal outcome."""


def _prompt(rng: random.Random) -> str:
    return "Write about " + " ".join(rng.choice(_WORDS) for _ in range(8)) + "."


def _chat(model: str, rng: random.Random, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": _prompt(rng)}], "max_tokens": MAX_TOKENS,
            **extra}


def make(kind: str, model: str, rng: random.Random) -> tuple[str, dict, bool]:
    """(path, JSON body, streamed) of one request of `kind`."""
    seed = rng.randrange(1 << 30)
    if kind == "chat_stream":  # seeded and sampled: replayed alone at the end, token for token
        return "/v1/chat/completions", _chat(model, rng, stream=True, temperature=0.8, seed=seed), True
    if kind == "chat_n":
        return "/v1/chat/completions", _chat(model, rng, n=2, temperature=0.8, seed=seed), False
    if kind == "completion_logprobs":
        return "/v1/completions", {"model": model, "prompt": _prompt(rng), "max_tokens": MAX_TOKENS,
                                   "logprobs": 2, "stream": True}, True
    if kind == "tools":
        return "/v1/chat/completions", _chat(model, rng, tools=[WEATHER_TOOL], tool_choice="required"), False
    if kind == "structured":
        return "/v1/chat/completions", _chat(model, rng, response_format={
            "type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}},
            max_tokens=64), False
    if kind == "embeddings":
        return "/v1/embeddings", {"model": model, "input": [_prompt(rng), _prompt(rng)]}, False
    if kind == "ollama_chat":
        return "/api/chat", {"model": model, "messages": [{"role": "user", "content": _prompt(rng)}],
                             "options": {"num_predict": MAX_TOKENS, "seed": seed}}, True
    if kind == "ollama_generate":
        return "/api/generate", {"model": model, "prompt": _prompt(rng), "stream": False,
                                 "options": {"num_predict": MAX_TOKENS}}, False
    if kind == "messages_stream":
        return "/v1/messages", {"model": model, "max_tokens": MAX_TOKENS, "stream": True,
                                "messages": [{"role": "user", "content": _prompt(rng)}]}, True
    if kind == "responses_stream":
        return "/v1/responses", {"model": model, "input": _prompt(rng), "max_output_tokens": MAX_TOKENS,
                                 "stream": True}, True
    raise ValueError(kind)


KINDS = ("chat_stream", "chat_n", "completion_logprobs", "tools", "structured", "embeddings", "ollama_chat",
         "ollama_generate", "messages_stream", "responses_stream")


def _json(raw: bytes, where: str):
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise Violation(f"{where}: not JSON: {raw[:120]!r}") from None


def _code(error: dict) -> str:
    return str(error.get("code") or error.get("type") or "?")


def _error_body(path: str, status: int, headers: dict, body: bytes) -> str:
    data = _json(body, f"{status} body")
    if path.startswith("/api/"):
        ok, code = isinstance(data.get("error"), str), str(status)
    elif path.startswith("/v1/messages"):
        ok = data.get("type") == "error" and isinstance(data.get("error", {}).get("message"), str)
        code = ok and _code(data["error"])
    else:
        ok = isinstance(data.get("error", {}).get("message"), str)
        code = ok and _code(data["error"])
    if not ok:
        raise Violation(f"{path} {status}: not the protocol's error shape: {body[:160]!r}")
    if status == 429:
        if not headers.get("retry-after", "").isdigit():
            raise Violation(f"{path} 429 without a Retry-After: {headers}")
        return "refused"
    return f"error {code}"


def _sse(body: bytes) -> list[tuple[str | None, bytes]]:
    """(event name, data) per event; every event must be whole."""
    if not body.endswith(b"\n\n"):
        raise Violation(f"SSE body cut inside an event: {body[-80:]!r}")
    events = []
    for block in body[:-2].split(b"\n\n"):
        name, data = None, None
        for line in block.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[7:].decode()
            elif line.startswith(b"data: "):
                data = line[6:]
            elif not line.startswith(b":"):
                raise Violation(f"SSE line that is neither event, data nor comment: {line[:80]!r}")
        if data is not None:
            events.append((name, data))
    return events


def _openai_stream(events, chat: bool) -> tuple[str, str]:
    if not events or events[-1][1] != b"[DONE]":
        raise Violation("OpenAI stream without its final [DONE]")
    datas = [_json(d, "SSE data") for _, d in events[:-1]]
    if any(d == b"[DONE]" for _, d in events[:-1]):
        raise Violation("OpenAI stream with more than one [DONE]")
    if datas and "error" in datas[-1]:
        return f"error {_code(datas[-1]['error'])}", ""
    if any("error" in d for d in datas):
        raise Violation("OpenAI stream: an error event that is not the last")
    finished = {c["index"] for d in datas for c in d.get("choices", ()) if c.get("finish_reason")}
    if not finished:
        raise Violation("OpenAI stream ended [DONE] without a finish_reason")
    key = "delta" if chat else None
    text = "".join((c[key].get("content") or "") if key else (c.get("text") or "")
                   for d in datas for c in d.get("choices", ()))
    return "ok", text


def _messages_stream(events) -> tuple[str, str]:
    datas = [_json(d, "SSE data") for _, d in events]
    kinds = [d.get("type") for d in datas]
    if not kinds or kinds[-1] not in ("message_stop", "error") or kinds[:-1].count("message_stop"):
        raise Violation(f"Messages stream does not end with one message_stop or error: {kinds[-3:]}")
    return ("ok" if kinds[-1] == "message_stop" else f"error {_code(datas[-1]['error'])}"), ""


def _responses_stream(events) -> tuple[str, str]:
    datas = [_json(d, "SSE data") for _, d in events]
    numbers = [d.get("sequence_number") for d in datas]
    if numbers != list(range(len(numbers))):
        raise Violation(f"Responses sequence_number not 0..n-1: {numbers[-6:]}")
    last = datas[-1]["type"] if datas else None
    terminals = ("response.completed", "response.incomplete", "response.failed")
    if last not in terminals or sum(d["type"] in terminals for d in datas) != 1:
        raise Violation(f"Responses stream does not end with exactly one terminal: {last}")
    if last == "response.failed":
        return f"error {_code(datas[-1]['response']['error'])}", ""
    return "ok", ""


def _ndjson(body: bytes) -> tuple[str, str]:
    if not body.endswith(b"\n"):
        raise Violation(f"NDJSON body cut inside a line: {body[-80:]!r}")
    lines = [_json(ln, "NDJSON line") for ln in body.split(b"\n") if ln]
    ends = [i for i, ln in enumerate(lines) if ln.get("done") is True or "error" in ln]
    if ends != [len(lines) - 1]:
        raise Violation(f"NDJSON stream without exactly one final done/error line: {ends} of {len(lines)}")
    return ("error stream" if "error" in lines[-1] else "ok"), ""


def check(path: str, stream: bool, status: int, headers: dict, body: bytes) -> tuple[str, str]:
    """(outcome, text) of one complete answer, or Violation."""
    if status != 200:
        return _error_body(path, status, headers, body), ""
    if not stream:
        data = _json(body, "200 body")
        if path.startswith("/api/") and "error" in data:
            raise Violation(f"{path} 200 with an error body")
        return "ok", ""
    if path.startswith("/api/"):
        return _ndjson(body)
    events = _sse(body)
    if path == "/v1/messages":
        return _messages_stream(events)
    if path == "/v1/responses":
        return _responses_stream(events)
    return _openai_stream(events, chat=path == "/v1/chat/completions")
