"""The OpenAPI 3.1 document served at GET /openapi.json.

Request bodies are rendered from the validators' own field tables (gateway/openai/requests.py,
gateway/ollama/requests.py, gateway/embeddings/requests.py, gateway/server/tokenize_routes.py,
gateway/serve/control_routes.py, gateway/ollama/info.py): a bound changed there changes the document.
Response bodies come from gateway/server/openapi_responses.py. `--lenient` opens the OpenAI bodies
(unknown fields ignored instead of 400), and the document says so.

/openapi.json is public, as vLLM serves its /openapi.json without its API key: it describes the
routes, not the models or traffic (no model names in it). With a key configured the document
declares bearer auth on every route but the public ones (gateway/http/auth.py's PUBLIC_PATHS).
The web chat page and its files (gateway/ui/) are served but are no part of the API: UNDOCUMENTED.
"""
from __future__ import annotations

from gateway.anthropic import openapi as anthropic
from gateway.responses import openapi as responses
from gateway.lora import routes as lora_routes
from gateway.http import auth
from gateway.serve import control_routes, slot_routes
from gateway.embeddings import requests as embeddings
from gateway.server import openapi_responses as r
from gateway.server import router_routes, tokenize_routes
from gateway.audio import openapi as audio_openapi
from gateway.http.fields import object_schema
from gateway.lora.selection import LORA_SHAPE
from gateway.openai.frames import SYSTEM_FINGERPRINT
from gateway.ollama import info as ollama_info
from gateway.ollama import requests as ollama_requests
from gateway.openai.requests import CHAT_FIELDS, CHAT_REQUIRED, COMPLETION_FIELDS, COMPLETION_REQUIRED, message_schema

PATH = "/openapi.json"
JSON = "application/json"
UNDOCUMENTED = frozenset({("get", "/ui"), ("get", "/ui/{asset}")})  # (method, path) left out on purpose


def _closed(fields: dict, required: tuple = (), *, lenient: bool) -> dict:
    """A body of dict-shaped fields ({name: JSON Schema}), closed unless lenient."""
    out = {"type": "object", "properties": dict(fields), "additionalProperties": lenient}
    if required:
        out["required"] = list(required)
    return out


def _openai_body(fields, required, lenient: bool, chat: bool) -> dict:
    schema = object_schema(fields, required, closed=not lenient)
    if chat:
        schema["properties"]["messages"]["items"] = message_schema(lenient)
    return schema


def _content(schema: dict, media: str = JSON) -> dict:
    return {media: {"schema": schema}}


def _errors(schema: dict, *statuses: int) -> dict:
    words = {400: "invalid request (unknown field, wrong type or value, prompt beyond the context)",
             401: "missing or wrong API key (only when one is configured)",
             404: "unknown model or id", 413: "body over --max-body-bytes", 415: "Content-Type is not JSON",
             429: "every slot of the model is taken and its queue is full",
             500: "the file could not be written or read (slot files)",
             501: "not enabled on this server (slot files: no --prefix-cache-dir)",
             502: "the lane failed mid-request",
             503: "lanes restarting, the server draining, or the model could not be loaded (model_load_failed: "
                  "its file or its lanes)"}
    out = {}
    for status in statuses:
        entry = {"description": words[status], "content": _content(schema)}
        if status in (429, 503):
            entry["headers"] = dict(r.RETRY_AFTER)
        out[str(status)] = entry
    return out


_GENERATION_ERRORS = (400, 401, 404, 413, 415, 429, 502, 503)


def _op(summary: str, ok: dict, *, body: dict | None = None, errors: tuple = (401,), error_schema: dict = r.ERROR,
        body_required: bool = True, params: list | None = None) -> dict:
    op = {"summary": summary, "responses": {"200": {"description": "success", "content": ok,
                                                     "headers": dict(r.REQUEST_ID)}, **_errors(error_schema, *errors)}}
    if body is not None:
        op["requestBody"] = {"required": body_required, "content": _content(body)}
    if params:
        op["parameters"] = params
    return op


def _operations(lenient: bool) -> dict[tuple[str, str], dict]:
    """(method, path) → operation, one per route app.py registers."""
    completion = _openai_body(COMPLETION_FIELDS, COMPLETION_REQUIRED, lenient, chat=False)
    chat = _openai_body(CHAT_FIELDS, CHAT_REQUIRED, lenient, chat=True)
    stream_or_json = lambda schema, chunk: {JSON: {"schema": schema},  # noqa: E731
                                            "text/event-stream": {"schema": r.sse(chunk)}}
    ndjson_or_json = lambda schema: {JSON: {"schema": schema}, "application/x-ndjson": {"schema": r.NDJSON}}  # noqa: E731
    ollama = r.OLLAMA_ERROR
    model_id = [{"name": "model_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    request_id = [{"name": "request_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    messages, count = anthropic.bodies(lenient)
    return {
        ("post", "/v1/completions"): _op("OpenAI text completion (SSE when stream is true)",
                                         stream_or_json(r.COMPLETION, r.COMPLETION_CHUNK), body=completion, errors=_GENERATION_ERRORS),
        ("post", "/v1/chat/completions"): _op("OpenAI chat completion (SSE when stream is true)",
                                              stream_or_json(r.CHAT_COMPLETION, r.CHAT_CHUNK), body=chat, errors=_GENERATION_ERRORS),
        ("post", "/v1/embeddings"): _op("OpenAI embeddings", _content(r.EMBEDDINGS), errors=_GENERATION_ERRORS,
                                        body=_closed(embeddings.OPENAI_FIELDS, embeddings.OPENAI_REQUIRED,
                                                     lenient=lenient)),
        ("post", "/v1/responses"): _op("OpenAI Responses (SSE when stream is true; stored unless store is false)",
                                       {JSON: {"schema": responses.RESPONSE}, "text/event-stream": {"schema": responses.EVENT}},
                                       body=responses.body(lenient), errors=_GENERATION_ERRORS),
        ("get", "/v1/responses/{response_id}"): _op("a stored response", _content(responses.RESPONSE),
                                                    errors=(401, 404), params=responses.RESPONSE_ID),
        ("delete", "/v1/responses/{response_id}"): _op("forget a stored response", _content(responses.DELETED),
                                                       errors=(401, 404), params=responses.RESPONSE_ID),
        ("post", "/v1/messages"): _op("Anthropic Messages (SSE when stream is true)",
                                      {JSON: {"schema": anthropic.MESSAGE}, "text/event-stream": {"schema": anthropic.EVENT}},
                                      body=messages, errors=_GENERATION_ERRORS, error_schema=anthropic.ERROR),
        ("post", "/v1/messages/count_tokens"): _op("Anthropic: the prompt's token count", _content(anthropic.COUNT),
                                                   body=count, errors=(400, 401, 404, 413, 415),
                                                   error_schema=anthropic.ERROR),
        ("get", "/v1/models"): _op("served models", _content(r.MODEL_LIST)),
        ("get", "/v1/models/{model_id}"): _op("one served model", _content(r.MODEL_CARD), errors=(401, 404),
                                              params=model_id),
        ("post", "/tokenize"): _op("text or chat messages → token ids", _content(r.TOKENIZE),
                                   body=_closed(tokenize_routes.TOKENIZE_FIELDS, lenient=lenient),
                                   errors=(400, 401, 404, 413, 415)),
        ("post", "/detokenize"): _op("token ids → text", _content(r.DETOKENIZE), errors=(400, 401, 404, 413, 415),
                                     body=_closed(tokenize_routes.DETOKENIZE_FIELDS,
                                                  tokenize_routes.DETOKENIZE_REQUIRED, lenient=lenient)),
        ("post", "/stop"): _op("cancel every queued and running request (of one model)", _content(r.STOP),
                               body=_closed(control_routes.STOP_FIELDS, lenient=lenient), body_required=False,
                               errors=(400, 401, 404, 413, 415)),
        ("delete", "/v1/requests/{request_id}"): _op("cancel one request by its X-Request-ID", _content(r.CANCEL),
                                                     errors=(401, 404), params=request_id),
        ("post", "/slots/{id_slot}"): _op("llama-server: save, restore or erase a slot's cached prompt "
                                          "(?action=save|restore|erase; files in --prefix-cache-dir)",
                                          _content({"type": "object", "required": ["id_slot"]}),
                                          body=_closed(slot_routes.SLOT_FIELDS, lenient=lenient), body_required=False,
                                          errors=(400, 401, 404, 500, 501, 503), error_schema=r.LLAMA_ERROR,
                                          params=[{"name": "id_slot", "in": "path", "required": True,
                                                   "schema": {"type": "integer"}},
                                                  {"name": "action", "in": "query", "required": True,
                                                   "schema": {"enum": ["save", "restore", "erase"]}}]),
        ("post", "/v1/load_lora_adapter"): _op("vLLM: load a LoRA adapter from --lora-dir, served as model lora_name",
                                               {"text/plain": {"schema": r.TEXT}}, errors=(400, 401, 404, 413, 415),
                                               body=_closed(lora_routes.LOAD_FIELDS, ("lora_name", "lora_path"),
                                                            lenient=lenient)),
        ("post", "/v1/unload_lora_adapter"): _op("vLLM: unload a LoRA adapter (running requests keep it)",
                                                 {"text/plain": {"schema": r.TEXT}}, errors=(400, 401, 404, 413, 415),
                                                 body=_closed(lora_routes.UNLOAD_FIELDS, ("lora_name",), lenient=lenient)),
        ("get", "/lora-adapters"): _op("llama-server: loaded LoRA adapters and their global scales",
                                       _content({"type": "array", "items": {"type": "object", "required": [
                                           "id", "path", "scale"]}})),
        ("post", "/lora-adapters"): _op("llama-server: global LoRA scales for requests naming the base model "
                                        "(adapters left out: 0)", _content(r.ROUTER_SUCCESS),
                                        body={"type": "array", "items": LORA_SHAPE["items"]},
                                        errors=(400, 401, 413, 415)),
        ("post", "/set_lora"): _op("SiMa: a model's default LoRA adapter (loaded from --lora-dir if needed)",
                                   _content({"type": "object"}), errors=(400, 401, 404, 413, 415),
                                   body=_closed(lora_routes.SET_FIELDS, ("name",), lenient=lenient)),
        ("post", "/unset_lora"): _op("SiMa: back to the base weights", _content({"type": "object"}),
                                     errors=(400, 401, 404, 413, 415), body_required=False,
                                     body=_closed(lora_routes.UNSET_FIELDS, lenient=lenient)),
        ("get", "/models"): _op("llama-server router: every model and whether it is loaded", _content(r.ROUTER_MODELS)),
        ("post", "/models/load"): _op("load a model (unloading the least recently used idle one at --models-max)",
                                      _content(r.ROUTER_SUCCESS), body=_closed(router_routes.MODEL_FIELDS, ("model",),
                                                                               lenient=lenient),
                                      errors=(400, 401, 404, 413, 415, 503)),
        ("post", "/models/unload"): _op("unload a model once its requests end", _content(r.ROUTER_SUCCESS),
                                        body=_closed(router_routes.MODEL_FIELDS, ("model",), lenient=lenient),
                                        errors=(400, 401, 404, 413, 415, 503)),
        ("get", "/health/live"): _op("the process answers", _content(r.LIVE), errors=()),
        ("get", "/health/ready"): {**_op("every model has a serving lane", _content(r.READY), errors=()),
                                   "responses": {"200": {"description": "ready or degraded",
                                                         "content": _content(r.READY)},
                                                 "503": {"description": "unavailable or draining",
                                                         "content": _content(r.READY),
                                                         "headers": dict(r.RETRY_AFTER)}}},
        **{("get", path): {**_op("llama-server's health check", _content(r.LIVE), errors=()),
                           "responses": {"200": {"description": "every model can serve", "content": _content(r.LIVE)},
                                         "503": {"description": "loading or draining",
                                                 "content": _content(r.LLAMA_ERROR),
                                                 "headers": dict(r.RETRY_AFTER)}}}
           for path in ("/health", "/v1/health")},
        ("get", "/metrics"): _op("Prometheus text exposition",
                                 {"text/plain": {"schema": r.TEXT}}),
        ("post", "/api/chat"): _op("Ollama chat (NDJSON unless stream is false)", ndjson_or_json(r.OLLAMA_CHAT),
                                   body=ollama_requests.body_schema(ollama_requests.CHAT_FIELDS),
                                   errors=(400, 401, 404, 413, 503), error_schema=ollama),
        ("post", "/api/generate"): _op("Ollama generate (NDJSON unless stream is false)",
                                       ndjson_or_json(r.OLLAMA_GENERATE),
                                       body=ollama_requests.body_schema(ollama_requests.GENERATE_FIELDS),
                                       errors=(400, 401, 404, 413, 503), error_schema=ollama),
        ("post", "/api/embed"): _op("Ollama embeddings", _content(r.OLLAMA_EMBED), error_schema=ollama,
                                    body=ollama_requests.body_schema(embeddings.OLLAMA_EMBED_FIELDS),
                                    errors=(400, 401, 404, 413, 503)),
        ("post", "/api/embeddings"): _op("Ollama legacy embeddings", _content(r.OLLAMA_EMBEDDINGS), error_schema=ollama,
                                         body=ollama_requests.body_schema(embeddings.OLLAMA_LEGACY_FIELDS),
                                         errors=(400, 401, 404, 413, 503)),
        ("get", "/api/tags"): _op("Ollama: local models", _content(r.OLLAMA_TAGS), error_schema=ollama),
        ("post", "/api/show"): _op("Ollama: one model's facts", _content(r.OLLAMA_SHOW), error_schema=ollama,
                                   body=ollama_info.SHOW_BODY, errors=(400, 401, 404, 413)),
        ("get", "/api/ps"): _op("Ollama: running models", _content(r.OLLAMA_PS), error_schema=ollama),
        ("get", "/api/version"): _op("Ollama API level", _content(r.OLLAMA_VERSION), error_schema=ollama),
        ("get", "/"): _op("\"Ollama is running\"", {"text/plain": {"schema": r.TEXT}}, errors=()),
        ("head", "/"): _op("\"Ollama is running\" (headers only)", {"text/plain": {"schema": r.TEXT}}, errors=()),
        ("get", PATH): _op("this document", _content({"type": "object"}), errors=()),
        **audio_openapi.operations(lenient=lenient),
    }


def document(*, lenient: bool = False, api_key: bool = False) -> dict:
    paths: dict = {}
    for (method, path), op in _operations(lenient).items():
        if api_key and path not in auth.PUBLIC_PATHS:
            op = {**op, "security": [{"bearer": []}]}
        paths.setdefault(path, {})[method] = op
    doc = {
        "openapi": "3.1.0",
        "info": {"title": "laneserve", "version": SYSTEM_FINGERPRINT.removeprefix("laneserve-"),
                 "description": "OpenAI-, Anthropic- and Ollama-compatible LLM server. Errors are "
                                "{\"error\": {\"message\", \"type\", \"param\", \"code\"}} (OpenAI routes), "
                                "{\"error\": message} (/api/*) or {\"type\": \"error\", \"error\": {\"type\", "
                                "\"message\"}} (/v1/messages*), with X-Request-ID."},
        "paths": paths,
        "components": {"schemas": {"Error": r.ERROR, "OllamaError": r.OLLAMA_ERROR, "AnthropicError": anthropic.ERROR}},
    }
    if api_key:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return doc


def openapi_path(sanic_path: str) -> str:
    """Sanic's `/v1/models/<model_id:str>` → OpenAPI's `/v1/models/{model_id}`."""
    parts = []
    for part in sanic_path.split("/"):
        if part.startswith("<") and part.endswith(">"):
            part = "{" + part[1:-1].split(":")[0] + "}"
        parts.append(part)
    return "/".join(parts) or "/"
