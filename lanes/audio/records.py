"""Encode/decode the audio lane's records (layouts: lanes.wire AUDIO_REQUEST_HEADER,
TRANSCRIPT_HEADER, built from csrc/ring/wire.h). Both the gateway and the lane use these."""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass

from lanes import wire
from lanes.api import TranscriptPart

_AUDIO = wire.AUDIO_REQUEST_HEADER
_TRANSCRIPT = wire.TRANSCRIPT_HEADER
MAX_PROMPT_BYTES = 4096
FALLBACK_TEMPERATURE = -1.0  # wire value: use the fallback schedule


@dataclass(frozen=True)
class AudioJob:
    """One transcription as the lane receives it."""
    request_id: int
    shm_name: str
    num_samples: int
    translate: bool = False
    word_timestamps: bool = False
    language: str = ""          # "" = detect
    prompt: str = ""
    temperature: float = FALLBACK_TEMPERATURE

    def __post_init__(self) -> None:
        if not 0 < self.request_id < 2**64:
            raise ValueError("request_id must be in [1, 2^64)")
        if self.num_samples < 1:
            raise ValueError("num_samples must be >= 1")
        if len(self.prompt.encode("utf-8")) > MAX_PROMPT_BYTES:
            raise ValueError(f"prompt longer than {MAX_PROMPT_BYTES} bytes")


def encode_audio_request(job: AudioJob) -> bytes:
    flags = (wire.AUDIO_TRANSLATE if job.translate else 0) | (wire.AUDIO_WORD_TIMESTAMPS if job.word_timestamps else 0)
    name, language, prompt = (s.encode("utf-8") for s in (job.shm_name, job.language, job.prompt))
    return _AUDIO.pack(request_id=job.request_id, num_samples=job.num_samples, flags=flags,
                       temperature=job.temperature, name_bytes=len(name), language_bytes=len(language),
                       prompt_bytes=len(prompt), reserved=0) + name + language + prompt


def decode_audio_request(payload: bytes) -> AudioJob:
    """ValueError names the problem if the payload is truncated or inconsistent."""
    if len(payload) < _AUDIO.size:
        raise ValueError("AUDIO_REQUEST record truncated")
    h = _AUDIO.unpack(payload)
    n_name, n_lang, flags = h["name_bytes"], h["language_bytes"], h["flags"]
    if _AUDIO.size + n_name + n_lang + h["prompt_bytes"] != len(payload):
        raise ValueError("AUDIO_REQUEST string sizes do not match the record")
    at = _AUDIO.size
    name, language, prompt = (payload[at:at + n_name], payload[at + n_name:at + n_name + n_lang],
                              payload[at + n_name + n_lang:])
    return AudioJob(h["request_id"], name.decode("utf-8"), h["num_samples"], bool(flags & wire.AUDIO_TRANSLATE),
                    bool(flags & wire.AUDIO_WORD_TIMESTAMPS), language.decode("utf-8"), prompt.decode("utf-8"),
                    h["temperature"])


def encode_transcript(request_id: int, kind: str, value: dict) -> bytes:
    return _TRANSCRIPT.pack(request_id=request_id, kind=wire.TRANSCRIPT_KINDS[kind], reserved=0) + json.dumps(
        value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


_KIND_NAMES = {v: k for k, v in wire.TRANSCRIPT_KINDS.items()}


def transcript_part(payload: bytes) -> tuple[int, TranscriptPart | None]:
    """(request_id, the part), or (request_id or 0, None) for a malformed record."""
    try:
        request_id, kind, value = decode_transcript(payload)
    except (ValueError, struct.error):
        return (_TRANSCRIPT.unpack(payload)["request_id"] if len(payload) >= _TRANSCRIPT.size else 0), None
    return request_id, TranscriptPart(kind, value)


def decode_transcript(payload: bytes) -> tuple[int, str, dict]:
    """→ (request_id, "info" | "segment", the JSON object)."""
    h = _TRANSCRIPT.unpack(payload)
    request_id, kind = h["request_id"], h["kind"]
    value = json.loads(payload[_TRANSCRIPT.size:])
    if kind not in _KIND_NAMES or not isinstance(value, dict):
        raise ValueError(f"TRANSCRIPT record of unknown kind {kind}")
    return request_id, _KIND_NAMES[kind], value
