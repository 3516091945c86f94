"""JSON Schemas of what the routes answer, for the OpenAPI document (gateway/server/openapi.py).

Request schemas come from the validators' own field tables; these describe our response bodies.
The schemathesis run in tests/reliability checks every answer of a real server against them, so a
body that drifts from its schema fails a test. Objects stay open (extra keys allowed): clients
ignore unknown keys, and the schemas name what a client may rely on.
"""
from __future__ import annotations

from gateway.serve.lanes import FINISH_REASONS

_STR = {"type": "string"}
_INT = {"type": "integer"}
_NUM = {"type": "number"}
_NULLABLE_STR = {"type": ["string", "null"]}


def obj(required: dict, optional: dict | None = None) -> dict:
    return {"type": "object", "required": list(required), "properties": {**required, **(optional or {})}}


ERROR = obj({"error": obj({"message": _STR, "type": _STR, "param": _NULLABLE_STR, "code": _NULLABLE_STR})})
OLLAMA_ERROR = {"anyOf": [obj({"error": _STR}), ERROR]}  # the OpenAI envelope: a refusal before the route
# llama-server's own routes (slot files): an integer code equal to the status
LLAMA_ERROR = {"anyOf": [obj({"error": obj({"code": _INT, "message": _STR, "type": _STR})}), ERROR]}
RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "string"},
                               "required": True}}
REQUEST_ID = {"X-Request-ID": {"description": "the client's valid X-Request-ID, else a fresh one",
                               "schema": {"type": "string"}}}

_FINISH = {"enum": [*FINISH_REASONS, None]}
USAGE = obj({"prompt_tokens": _INT, "completion_tokens": _INT, "total_tokens": _INT})
COMPLETION = obj({
    "id": _STR, "object": {"const": "text_completion"}, "created": _INT, "model": _STR,
    "choices": {"type": "array", "items": obj({"index": _INT, "text": _STR, "finish_reason": _FINISH})},
    "usage": USAGE,
})
CHAT_COMPLETION = obj({
    "id": _STR, "object": {"const": "chat.completion"}, "created": _INT, "model": _STR,
    "choices": {"type": "array", "items": obj({
        "index": _INT, "finish_reason": _FINISH,
        "message": obj({"role": {"const": "assistant"}, "content": _NULLABLE_STR},
                       {"reasoning_content": _NULLABLE_STR}),
    })},
    "usage": USAGE,
})


def sse(chunk: dict) -> dict:
    """One server-sent event (schemathesis validates a text/event-stream event by event, as
    OpenAPI 3.2's itemSchema will; 3.1 has only `schema`, which we give the event's shape):
    `data` is `[DONE]` or a JSON chunk — the route's chunk, or the error envelope after a failure
    mid-stream. `: keep-alive` comment lines in silences carry no event."""
    payload = {"type": "string", "if": {"const": "[DONE]"},
               "else": {"contentMediaType": "application/json", "contentSchema": {"anyOf": [chunk, ERROR]}}}
    return {"type": "object", "required": ["data"], "properties": {"event": {"const": "message"}, "data": payload}}


_CHUNK_HEAD = {"id": _STR, "created": _INT, "model": _STR}
COMPLETION_CHUNK = obj({**_CHUNK_HEAD, "object": {"const": "text_completion"},
                        "choices": {"type": "array", "items": obj({"index": _INT, "text": _STR,
                                                                    "finish_reason": _FINISH})}},
                       {"usage": {"anyOf": [USAGE, {"type": "null"}]}})
CHAT_CHUNK = obj({**_CHUNK_HEAD, "object": {"const": "chat.completion.chunk"},
                  "choices": {"type": "array", "items": obj({
                      "index": _INT, "finish_reason": _FINISH,
                      "delta": {"type": "object", "properties": {"role": {"const": "assistant"}, "content": _STR,
                                                                 "reasoning_content": _STR}}})}},
                 {"usage": {"anyOf": [USAGE, {"type": "null"}]}})
NDJSON = {"type": "string", "description": "one JSON object per line; the last has `done: true`, or is "
                                           "`{\"error\": …}` after a failure"}
_VECTOR = {"type": "array", "items": _NUM}
EMBEDDINGS = obj({
    "object": {"const": "list"}, "model": _STR,
    "data": {"type": "array", "items": obj({"object": {"const": "embedding"}, "index": _INT,
                                            "embedding": {"anyOf": [_VECTOR, _STR]}})},
    "usage": obj({"prompt_tokens": _INT, "total_tokens": _INT}),
})
_ROUTER_STATUS = obj({"value": {"enum": ["loaded", "loading", "unloading", "unloaded"]}},
                     {"failed": {"type": "boolean"}, "error": _STR})
MODEL_CARD = obj({"id": _STR, "object": {"const": "model"}, "created": _INT, "owned_by": _STR},
                 {"max_model_len": _INT, "status": _ROUTER_STATUS, "laneserve": {"type": "object"}})
MODEL_LIST = obj({"object": {"const": "list"}, "data": {"type": "array", "items": MODEL_CARD}})
ROUTER_MODELS = obj({"object": {"const": "list"}, "data": {"type": "array", "items": obj(
    {"id": _STR, "object": {"const": "model"}, "owned_by": _STR, "created": _INT, "path": _STR,
     "status": _ROUTER_STATUS})}})
ROUTER_SUCCESS = obj({"success": {"const": True}})
TOKENIZE = obj({"tokens": {"type": "array", "items": {"anyOf": [_INT, obj({"id": _INT, "piece": _STR})]}},
                "count": _INT, "max_model_len": _INT})
DETOKENIZE = obj({"prompt": _STR, "content": _STR})
STOP = obj({"cancelled": {"type": "array", "items": _STR}, "count": _INT})
CANCEL = obj({"id": _STR, "cancelled": {"const": True}})
LIVE = obj({"status": {"const": "ok"}})
READY = obj({"status": {"enum": ["ready", "degraded", "unavailable", "draining"]},
             "models": {"type": "object", "additionalProperties": obj({
                 "status": {"enum": ["ready", "degraded", "unavailable", "loading", "unloading", "unloaded", "failed"]},
                 "ready_replicas": _INT, "slots": _INT, "slots_in_use": _INT, "queued": _INT,
                 "lanes": {"type": "array"}}, {"residency": {"type": ["object", "null"]},
                                              "prompt_cache": {"type": ["object", "null"]}})}})
TEXT = {"type": "string"}

_OLLAMA_DONE = {"done": {"type": "boolean"}, "done_reason": _STR, "total_duration": _INT, "eval_count": _INT,
                "prompt_eval_count": _INT}
OLLAMA_CHAT = obj({"model": _STR, "created_at": _STR, "done": {"type": "boolean"},
                   "message": obj({"role": _STR, "content": _STR}, {"thinking": _STR})}, _OLLAMA_DONE)
OLLAMA_GENERATE = obj({"model": _STR, "created_at": _STR, "response": _STR, "done": {"type": "boolean"}},
                      {**_OLLAMA_DONE, "context": {"type": "array", "items": _INT}, "thinking": _STR})
OLLAMA_EMBED = obj({"model": _STR, "embeddings": {"type": "array", "items": _VECTOR}},
                   {"prompt_eval_count": _INT, "total_duration": _INT})
OLLAMA_EMBEDDINGS = obj({"embedding": _VECTOR})
_OLLAMA_MODEL = obj({"name": _STR, "model": _STR, "modified_at": _STR, "size": _INT, "digest": _STR,
                     "details": {"type": "object"}})
OLLAMA_TAGS = obj({"models": {"type": "array", "items": _OLLAMA_MODEL}})
OLLAMA_PS = obj({"models": {"type": "array", "items": obj(
    {**_OLLAMA_MODEL["properties"], "expires_at": _STR, "size_vram": _INT, "context_length": _INT})}})
OLLAMA_SHOW = obj({"modelfile": _STR, "parameters": _STR, "template": _STR, "details": {"type": "object"},
                   "model_info": {"type": "object"}, "capabilities": {"type": "array", "items": _STR}})
OLLAMA_VERSION = obj({"version": _STR})
