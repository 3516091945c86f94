"""The multipart form of /v1/audio/transcriptions and /v1/audio/translations → AudioRequest.

Fields as OpenAI names them: `file`, `model`, `language`, `prompt`, `temperature`,
`response_format`, `timestamp_granularities[]`, `stream`. Unknown fields → 400
`unknown_parameter` (ignored with --lenient, as for JSON routes); `include[]` (logprobs) and
other known-but-unsupported fields → 400 `unsupported_parameter`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from gateway.http.errors import APIError, invalid, safe_repr

RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
STREAM_FORMATS = ("json", "text")  # a stream is events, not a subtitle file
GRANULARITIES = ("segment", "word")
MAX_PROMPT_BYTES = 4096  # Whisper keeps the last 224 tokens of it anyway
_LANGUAGE = re.compile(r"^[a-z]{2,3}$")
_KNOWN = {"file", "model", "language", "prompt", "temperature", "response_format", "timestamp_granularities[]",
          "timestamp_granularities", "stream"}
_UNSUPPORTED = {"include[]", "include", "chunking_strategy", "known_speaker_names[]", "known_speaker_references[]"}


@dataclass(frozen=True)
class AudioRequest:
    model: str
    audio: bytes
    language: str = ""          # "" = detect
    prompt: str = ""
    temperature: float = -1.0   # < 0: Whisper's fallback schedule
    response_format: str = "json"
    word_timestamps: bool = False
    stream: bool = False
    ignored_fields: tuple[str, ...] = field(default=())


def _one(form, name: str) -> str | None:
    values = form.getlist(name) if form is not None else None
    if not values:
        return None
    if len(values) > 1:
        raise invalid(f"'{name}' was given {len(values)} times", param=name)
    return values[0]


def _bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0", ""):
        return False
    raise invalid(f"'{name}' must be true or false", param=name, code="invalid_type")


MULTIPART_OVERHEAD_BYTES = 1 << 20  # the form's other fields and part headers around the file


def audio_body_max_bytes(config) -> int:
    """The body limit of the audio routes: an upload of --max-audio-bytes plus the form around it.
    Every other route keeps Sanic's limit, --max-body-bytes, enforced while the body arrives (an
    oversized chunked upload is refused at the limit, not after it ends); the audio routes are
    streaming routes that raise their own limit before reading the body (gateway/audio/routes.py)."""
    return max(config.max_body_bytes, config.max_audio_bytes + MULTIPART_OVERHEAD_BYTES)


def parse_audio_form(form, files, *, lenient: bool, max_audio_bytes: int) -> AudioRequest:
    """form: name → [str] (Sanic's request.form); files: name → [File] (request.files)."""
    names = set(form or ()) | set(files or ())
    unsupported = sorted(names & _UNSUPPORTED)
    if unsupported:
        raise APIError(400, f"{safe_repr(unsupported[0])} is not supported", param=unsupported[0],
                       code="unsupported_parameter")
    unknown = tuple(sorted(names - _KNOWN - _UNSUPPORTED))
    if unknown and not lenient:
        raise APIError(400, f"unknown parameter {safe_repr(unknown[0])}", param=unknown[0], code="unknown_parameter")
    uploads = files.getlist("file") or [] if files else []
    if not uploads:
        if form is not None and form.get("file") is not None:
            raise invalid("'file' must be uploaded as a file part (multipart/form-data)", param="file")
        raise invalid("'file' is required (multipart/form-data with the audio file)", param="file",
                      code="missing_required_parameter")
    if len(uploads) > 1:
        raise invalid("'file' was given more than once", param="file")
    audio = uploads[0].body or b""
    if len(audio) > max_audio_bytes:
        raise APIError(413, f"the audio file is larger than the limit of {max_audio_bytes} bytes", param="file",
                       code="file_too_large")
    model = _one(form, "model")
    if not model:
        raise invalid("'model' is required", param="model", code="missing_required_parameter")
    language = (_one(form, "language") or "").strip().lower()
    if language == "auto":
        language = ""
    if language and not _LANGUAGE.match(language):
        raise invalid("'language' must be an ISO-639-1 code such as 'en' (or 'auto')", param="language")
    prompt = _one(form, "prompt") or ""
    if len(prompt.encode("utf-8", "replace")) > MAX_PROMPT_BYTES:
        raise invalid(f"'prompt' is longer than {MAX_PROMPT_BYTES} bytes", param="prompt")
    temperature = -1.0
    raw = _one(form, "temperature")
    if raw is not None and raw.strip():
        try:
            temperature = float(raw)
        except ValueError:
            raise invalid("'temperature' must be a number", param="temperature", code="invalid_type") from None
        if not 0.0 <= temperature <= 1.0:
            raise invalid("'temperature' must be between 0 and 1", param="temperature")
        if temperature == 0.0:
            temperature = -1.0  # OpenAI: 0 raises the temperature automatically on a failed decode
    response_format = _one(form, "response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        raise invalid(f"'response_format' must be one of {', '.join(RESPONSE_FORMATS)}", param="response_format")
    granularities = (form.getlist("timestamp_granularities[]") or []) + (form.getlist("timestamp_granularities") or []) \
        if form is not None else []
    for g in granularities:
        if g not in GRANULARITIES:
            raise invalid("'timestamp_granularities[]' values must be 'segment' or 'word'",
                          param="timestamp_granularities[]")
    if granularities and response_format != "verbose_json":
        raise invalid("'timestamp_granularities[]' needs response_format 'verbose_json'",
                      param="timestamp_granularities[]")
    stream = _bool("stream", _one(form, "stream") or "false")
    if stream and response_format not in STREAM_FORMATS:
        raise invalid(f"'stream' works with response_format {' or '.join(STREAM_FORMATS)}", param="stream")
    return AudioRequest(model=model, audio=audio, language=language, prompt=prompt, temperature=temperature,
                        response_format=response_format, word_timestamps="word" in granularities, stream=stream,
                        ignored_fields=unknown)
