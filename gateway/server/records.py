"""`--records FILE`: one JSON line per finished request — never prompt or output text.

The record type below is the whole schema: it has no field that could hold text, so text
cannot leak into the file by accident (stop strings and API keys are excluded too).
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

import orjson

OUTCOMES = ("success", "error", "timeout", "saturated", "disconnect", "cancelled")


@dataclass
class RequestRecord:
    request_id: str
    route: str
    session_id: str | None = None  # the client's X-Session-ID (gateway.http.session_ids), if sent
    model: str | None = None
    lora: list | None = None  # LoRA adapters the request ran with: [[adapter id, scale], ...]; None: the base
    stream: bool = False
    outcome: str = "error"
    status: int = 0
    error_code: str | None = None
    finish_reason: str | None = None
    n_choices: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
    admission_ms: float | None = None
    ttft_ms: float | None = None
    model_ms: float | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    total_ms: float = 0.0
    time_unix_s: float = 0.0


class RecordsFile:
    """Append-only JSON lines; each record is one write() of one line, flushed at once."""

    def __init__(self, path: str) -> None:
        self._path = path
        # O_APPEND: a line is never interleaved with another writer's; line buffering flushes.
        self._file = open(path, "a", buffering=1, encoding="utf-8")

    def write(self, record: RequestRecord) -> None:
        if record.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {record.outcome!r}")
        record.time_unix_s = round(time.time(), 3)
        self._file.write(orjson.dumps(asdict(record)).decode() + "\n")

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
