"""OpenAPI 3.1 operations of the audio routes, from the form parser's own tables
(gateway/audio/requests.py): `operations(lenient)` → {(method, path): operation}, ready to merge
into the server's OpenAPI document next to the JSON routes' operations."""
from __future__ import annotations

from gateway.audio.requests import GRANULARITIES, MAX_PROMPT_BYTES, RESPONSE_FORMATS

_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                                     "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}
_ERRORS = {400: "invalid form field, undecodable or empty audio, or a text model",
           401: "missing or wrong API key (only when one is configured)", 404: "unknown model",
           413: "file over --max-audio-bytes, or audio longer than --max-audio-s",
           415: "not multipart/form-data", 429: "every slot of the model is taken and its queue is full",
           499: "cancelled (POST /stop, DELETE /v1/requests/{id})",
           503: "lanes restarting, the lane failed mid-request, or the server is draining"}
_SEGMENT = {"type": "object", "properties": {
    name: {"type": kind} for name, kind in (("id", "integer"), ("seek", "integer"), ("start", "number"),
                                            ("end", "number"), ("text", "string"), ("temperature", "number"),
                                            ("avg_logprob", "number"), ("compression_ratio", "number"),
                                            ("no_speech_prob", "number"))} | {"tokens": {"type": "array", "items": {"type": "integer"}}}}
_WORD = {"type": "object", "properties": {"word": {"type": "string"}, "start": {"type": "number"},
                                          "end": {"type": "number"}}}
_LANGUAGE = {"language": {"type": "string", "description": "ISO-639-1 code, detected or given"},
             "language_probability": {"type": "number", "description": "the detector's confidence"}}
_JSON = {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}, **_LANGUAGE,
                                                               "usage": {"type": "object"}}}
_VERBOSE = {"type": "object", "required": ["text", "task", "duration"], "properties": {
    "task": {"enum": ["transcribe", "translate"]}, "duration": {"type": "number"}, "text": {"type": "string"},
    **_LANGUAGE, "segments": {"type": "array", "items": _SEGMENT}, "words": {"type": "array", "items": _WORD},
    "usage": {"type": "object"}}}
_EVENT = {"type": "string", "description": "SSE: data: {\"type\": \"transcript.text.delta\", \"delta\"} per decoded "
                                            "segment, then data: {\"type\": \"transcript.text.done\", \"text\", "
                                            "\"language\", \"language_probability\", \"usage\"}"}


def form_schema(*, lenient: bool) -> dict:
    props = {
        "file": {"type": "string", "contentMediaType": "application/octet-stream",
                 "description": "audio: wav, mp3, m4a, ogg/opus, webm, flac, … (PyAV/FFmpeg)"},
        "model": {"type": "string"},
        "language": {"type": "string", "description": "ISO-639-1 code, or auto (default)"},
        "prompt": {"type": "string", "maxLength": MAX_PROMPT_BYTES},
        "temperature": {"type": "number", "minimum": 0, "maximum": 1},
        "response_format": {"enum": list(RESPONSE_FORMATS), "default": "json"},
        "timestamp_granularities[]": {"type": "array", "items": {"enum": list(GRANULARITIES)}},
        "stream": {"type": "boolean", "default": False},
    }
    return {"type": "object", "required": ["file", "model"], "properties": props, "additionalProperties": lenient}


def operations(*, lenient: bool = False) -> dict[tuple[str, str], dict]:
    ok = {"application/json": {"schema": {"oneOf": [_JSON, _VERBOSE]}},
          "text/plain": {"schema": {"type": "string"}}, "application/x-subrip": {"schema": {"type": "string"}},
          "text/vtt": {"schema": {"type": "string"}}, "text/event-stream": {"schema": _EVENT}}
    errors = {str(status): {"description": words, "content": {"application/json": {"schema": _ERROR}}}
              for status, words in _ERRORS.items()}
    for status in ("429", "503"):
        errors[status]["headers"] = {"Retry-After": {"description": "seconds to wait before retrying",
                                                     "schema": {"type": "integer"}}}
    body = {"required": True, "content": {"multipart/form-data": {"schema": form_schema(lenient=lenient)}}}

    def op(summary: str) -> dict:
        return {"summary": summary, "requestBody": body,
                "responses": {"200": {"description": "success", "content": ok}, **errors}}

    return {("post", "/v1/audio/transcriptions"): op("speech to text (SSE when stream is true)"),
            ("post", "/v1/audio/translations"): op("speech to English text (SSE when stream is true)")}
