"""Ollama's error shape — `{"error": "message"}` with the status — and its model names, for every
Ollama route (generation, embeddings, info)."""
from __future__ import annotations

import functools

from sanic.response import HTTPResponse

from gateway.http.auth import OLLAMA_PREFIX
from gateway.http.errors import APIError
from gateway.http.request_ids import HEADER as REQUEST_ID_HEADER
from gateway.ollama.frames import error_body
from gateway.ollama.requests import OllamaError

JSON = "application/json; charset=utf-8"


def message(exc: APIError) -> str:
    """The error's text as Ollama words it: no free slot is "server busy, please try again"."""
    if exc.code == "server_busy":
        return f"server busy, please try again: {exc.message[:1].lower()}{exc.message[1:]}"
    return exc.message


def is_ollama_path(path: str) -> bool:
    """Ollama's routes live under /api: an error there (an unknown route, a wrong method, a body over
    the limit) is answered in its shape, which the ollama client reads."""
    return path == OLLAMA_PREFIX.rstrip("/") or path.startswith(OLLAMA_PREFIX)


def error_response(request_id: str, exc: APIError) -> HTTPResponse:
    """Any APIError (ours and the shared parsers') the Ollama way. Every slot and the queue taken
    is a 503, as Ollama answers when its queue is full (not OpenAI's 429)."""
    status = 503 if exc.code == "server_busy" else exc.status
    return HTTPResponse(error_body(message(exc)), status=status,
                        headers={REQUEST_ID_HEADER: request_id, **exc.headers}, content_type=JSON)


def ollama_errors(handler):
    """For the Ollama routes outside the pipeline (gateway/ollama/info.py)."""
    @functools.wraps(handler)
    async def wrapped(request, *args, **kwargs):
        try:
            return await handler(request, *args, **kwargs)
        except APIError as exc:
            return error_response(request.ctx.request_id, exc)
    return wrapped


def served_model(state, name: str):
    """Ollama names carry a tag; ours are plain: "smollm2" and "smollm2:latest" are the same.
    Only text models: Ollama has no audio models."""
    served = state.find_model(name) or (state.find_model(name[: -len(":latest")]) if name.endswith(":latest") else None)
    if served is None:
        shown = name if len(name) <= 64 and name.isprintable() else "<model>"
        raise OllamaError(404, f"model '{shown}' not found")
    if served.is_audio:
        raise OllamaError(400, f"model '{served.name}' is a speech-to-text model; the Ollama routes serve text "
                          "models (use /v1/audio/transcriptions)")
    return served
