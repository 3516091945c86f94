"""Transcription results in OpenAI's response formats: json, text, srt, vtt, verbose_json.

The text is the concatenation of the lane's deltas (what a stream sends), so streamed and
non-streamed answers agree by construction. Timestamps are seconds, clamped to the audio's
duration (Whisper's last timestamp token can point a little past the end) and made
non-decreasing. Besides OpenAI's fields, json and verbose_json carry `language` (the ISO code
the model detected or was given) and `language_probability` (the detector's confidence; 1.0
when the language was given).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Transcript:
    text: str = ""
    language: str = ""
    language_probability: float = 0.0
    duration_s: float = 0.0
    segments: list[dict] = field(default_factory=list)

    def add(self, kind: str, value: dict) -> None:
        if kind == "info":
            self.language = str(value.get("language", ""))
            self.language_probability = float(value.get("language_probability", 0.0))
            self.duration_s = float(value.get("duration", 0.0))
        elif kind == "segment":
            self.segments.append(value)

    def timed_segments(self) -> list[dict]:
        """Segments with clamped, non-decreasing start/end (and words likewise)."""
        out, last = [], 0.0
        for seg in self.segments:
            start = min(max(float(seg["start"]), last), self.duration_s)
            end = min(max(float(seg["end"]), start), self.duration_s)
            words, w_last = [], start
            for w in seg.get("words") or ():
                w_start = min(max(float(w["start"]), w_last), end)
                w_end = min(max(float(w["end"]), w_start), end)
                words.append({"word": w["word"].strip(), "start": w_start, "end": w_end,
                              "probability": w.get("probability")})
                w_last = w_end
            out.append({**seg, "start": start, "end": end, "text": seg["text"].strip(), "words": words})
            last = end
        return out


def _usage(t: Transcript) -> dict:
    return {"type": "duration", "seconds": round(t.duration_s, 3)}


def json_body(t: Transcript) -> dict:
    return {"text": t.text, "language": t.language, "language_probability": t.language_probability,
            "usage": _usage(t)}


def verbose_json_body(t: Transcript, task: str, words: bool) -> dict:
    segments = t.timed_segments()
    body = {
        "task": task, "language": t.language, "language_probability": t.language_probability,
        "duration": round(t.duration_s, 3), "text": t.text,
        "segments": [{k: s[k] for k in ("id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob",
                                         "compression_ratio", "no_speech_prob")} for s in segments],
        "usage": _usage(t),
    }
    if words:
        body["words"] = [{"word": w["word"], "start": w["start"], "end": w["end"]} for s in segments for w in s["words"]]
    return body


def _clock(seconds: float, separator: str) -> str:
    ms = int(round(seconds * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{separator}{ms:03d}"


def srt_text(t: Transcript) -> str:
    cues = [f"{i}\n{_clock(s['start'], ',')} --> {_clock(s['end'], ',')}\n{s['text']}\n"
            for i, s in enumerate((s for s in t.timed_segments() if s["text"]), start=1)]
    return "\n".join(cues) + ("\n" if cues else "")


def vtt_text(t: Transcript) -> str:
    cues = [f"{_clock(s['start'], '.')} --> {_clock(s['end'], '.')}\n{s['text']}\n"
            for s in t.timed_segments() if s["text"]]
    return "WEBVTT\n\n" + "\n".join(cues)


CONTENT_TYPES = {"text": "text/plain; charset=utf-8", "srt": "application/x-subrip; charset=utf-8",
                 "vtt": "text/vtt; charset=utf-8"}


def render(t: Transcript, response_format: str, task: str, words: bool) -> tuple[bytes, str]:
    """(body, content type) for a non-stream answer."""
    import orjson

    if response_format == "json":
        return orjson.dumps(json_body(t)), "application/json"
    if response_format == "verbose_json":
        return orjson.dumps(verbose_json_body(t, task, words)), "application/json"
    text = {"text": lambda: t.text + "\n", "srt": lambda: srt_text(t), "vtt": lambda: vtt_text(t)}[response_format]()
    return text.encode("utf-8"), CONTENT_TYPES[response_format]


def delta_framing() -> tuple[bytes, bytes]:
    """SSE framing of one streamed delta (the native relay puts the JSON-escaped text between)."""
    return b'data: {"type":"transcript.text.delta","delta":"', b'"}\n\n'


def done_event(t: Transcript, output_tokens: int) -> bytes:
    """The last event, as OpenAI sends it (a stream's usage counts tokens), plus the language."""
    import orjson

    body = {"type": "transcript.text.done", "text": t.text, "language": t.language,
            "language_probability": t.language_probability,
            "usage": {"type": "tokens", "input_tokens": 0, "output_tokens": output_tokens,
                      "total_tokens": output_tokens}}
    return b"data: " + orjson.dumps(body) + b"\n\n"
