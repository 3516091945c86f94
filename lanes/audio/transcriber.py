"""The speech-to-text engine of an audio lane: Whisper through faster-whisper on CTranslate2.

Why faster-whisper rather than CTranslate2's Whisper class alone: CTranslate2 runs the encoder,
the decoder and language detection (int8 on CPU, GIL released), but Whisper's transcription
loop — log-mel features, 30 s windows, timestamp tokens → segments, temperature fallback on
repetitive or low-probability output, conditioning on the previous window, word timings from
cross-attention alignment — is ~2000 lines on top. faster-whisper is that loop, maintained with
CTranslate2 by the same team; reimplementing it would be a second copy of the same algorithm.
We keep its defaults (beam 5, the fallback temperatures, no VAD) so results match the library's.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

COMPUTE_TYPE = "int8"  # int8 weights, the fast CPU path on this hardware
SAMPLE_RATE_HZ = 16_000
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
MAX_TARGET_TOKENS = 448  # Whisper's decoder context


def load_model(model_dir: str, threads: int):
    from faster_whisper import WhisperModel

    return WhisperModel(model_dir, device="cpu", compute_type=COMPUTE_TYPE, cpu_threads=max(1, threads),
                        num_workers=1)


def transcribe_options(language: str, prompt: str, temperature: float, translate: bool, word_timestamps: bool) -> dict:
    """faster-whisper keyword arguments for one request (shared with benchmarks/audio_bench.py)."""
    return {
        "task": "translate" if translate else "transcribe",
        "language": language or None,
        "initial_prompt": prompt or None,
        "temperature": FALLBACK_TEMPERATURES if temperature < 0 else temperature,
        "word_timestamps": word_timestamps,
    }


class DeltaJoiner:
    """Segment texts → stream deltas whose concatenation is the whole transcript: Whisper
    segments start with a space, so the first is left-stripped; trailing whitespace is held back
    until more text follows, so the transcript never ends with it."""

    def __init__(self) -> None:
        self._started = False
        self._held = ""

    def push(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        body = text.rstrip()
        if not body:
            self._held += text
            return ""
        out, self._held = self._held + body, text[len(body):]
        return out


def _r(x: float) -> float:
    return round(float(x), 3)


def segment_json(seg, index: int) -> dict:
    out = {"id": index, "seek": int(seg.seek), "start": _r(seg.start), "end": _r(seg.end), "text": seg.text,
           "tokens": [int(t) for t in seg.tokens], "temperature": float(seg.temperature or 0.0),
           "avg_logprob": float(seg.avg_logprob), "compression_ratio": float(seg.compression_ratio),
           "no_speech_prob": float(seg.no_speech_prob)}
    if seg.words is not None:
        out["words"] = [{"word": w.word, "start": _r(w.start), "end": _r(w.end), "probability": _r(w.probability)}
                        for w in seg.words]
    return out


@dataclass
class Outcome:
    finish: str          # "stop" | "cancelled"
    num_tokens: int
    first_segment_ns: int  # job start → first segment decoded (0: none)
    total_ns: int


def run(model, samples: np.ndarray, options: dict, on_info: Callable[[dict], None],
        on_segment: Callable[[str, dict], None], cancelled: Callable[[], bool]) -> Outcome:
    """Transcribe; on_info once (language), then on_segment(delta_text, segment) per decoded
    segment. Stops between segments once cancelled() is true (a segment is ≤ one 30 s window)."""
    start_ns = time.monotonic_ns()
    segments, info = model.transcribe(samples, **options)
    on_info({"language": info.language, "language_probability": round(float(info.language_probability), 4),
             "duration": round(float(info.duration), 3)})
    joiner = DeltaJoiner()
    num_tokens = first_ns = 0
    for index, seg in enumerate(segments):
        if not first_ns:
            first_ns = time.monotonic_ns() - start_ns
        num_tokens += len(seg.tokens)
        on_segment(joiner.push(seg.text), segment_json(seg, index))
        if cancelled():
            return Outcome("cancelled", num_tokens, first_ns, time.monotonic_ns() - start_ns)
    return Outcome("stop", num_tokens, first_ns, time.monotonic_ns() - start_ns)
