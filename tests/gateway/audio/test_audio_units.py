"""Audio routes' pure parts: form parsing, decoding (PyAV), response formats."""
import io
import math
from pathlib import Path

import numpy as np
import pytest

from gateway.audio.decode import AudioDecodeError, AudioTooLong, decode_audio
from gateway.audio.formats import Transcript, render, srt_text, verbose_json_body, vtt_text
from gateway.audio.requests import parse_audio_form
from gateway.http.errors import APIError

CLIP = Path(__file__).resolve().parents[2] / "data" / "audio" / "speech_en.wav"


class Form(dict):
    def getlist(self, name, default=None):
        return self.get(name, default)


class File:
    def __init__(self, body: bytes):
        self.body = body


def parse(fields: dict, audio: bytes = b"RIFF", lenient: bool = False, max_audio_bytes: int = 1 << 20):
    form = Form({k: v if isinstance(v, list) else [v] for k, v in fields.items()})
    return parse_audio_form(form, Form({"file": [File(audio)]}), lenient=lenient, max_audio_bytes=max_audio_bytes)


def test_form_fields():
    req = parse({"model": "w", "language": "EN", "prompt": "Names", "temperature": "0.5",
                 "response_format": "verbose_json", "timestamp_granularities[]": ["word", "segment"]})
    assert (req.model, req.language, req.prompt, req.temperature, req.response_format, req.word_timestamps) == \
        ("w", "en", "Names", 0.5, "verbose_json", True)
    defaults = parse({"model": "w", "language": "auto", "temperature": "0"})
    assert (defaults.language, defaults.temperature, defaults.response_format, defaults.stream) == ("", -1.0, "json", False)
    assert parse({"model": "w", "stream": "true"}).stream is True


@pytest.mark.parametrize("fields, status, param", [
    ({}, 400, "model"),
    ({"model": "w", "temperature": "2"}, 400, "temperature"),
    ({"model": "w", "temperature": "hot"}, 400, "temperature"),
    ({"model": "w", "response_format": "xml"}, 400, "response_format"),
    ({"model": "w", "timestamp_granularities[]": "word"}, 400, "timestamp_granularities[]"),
    ({"model": "w", "response_format": "verbose_json", "timestamp_granularities[]": "char"}, 400,
     "timestamp_granularities[]"),
    ({"model": "w", "stream": "true", "response_format": "srt"}, 400, "stream"),
    ({"model": "w", "stream": "maybe"}, 400, "stream"),
    ({"model": "w", "language": "english!"}, 400, "language"),
    ({"model": "w", "include[]": "logprobs"}, 400, "include[]"),
    ({"model": "w", "colour": "red"}, 400, "colour"),
    ({"model": ["a", "b"]}, 400, "model"),
])
def test_bad_forms(fields, status, param):
    with pytest.raises(APIError) as info:
        parse(fields)
    assert (info.value.status, info.value.param) == (status, param)


def test_unknown_fields_with_lenient_and_missing_or_large_files():
    assert parse({"model": "w", "colour": "red"}, lenient=True).ignored_fields == ("colour",)
    with pytest.raises(APIError) as info:
        parse_audio_form(Form({"model": ["w"]}), Form(), lenient=False, max_audio_bytes=10)
    assert info.value.status == 400 and info.value.param == "file"
    with pytest.raises(APIError) as info:
        parse({"model": "w"}, audio=b"x" * 11, max_audio_bytes=10)
    assert info.value.status == 413


def _encode(fmt: str, codec: str, rate: int, samples: np.ndarray) -> bytes:
    import av

    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray((samples[None, :] * 32767).astype(np.int16), format="s16", layout="mono")
        frame.sample_rate = rate
        resampler = av.AudioResampler(format=stream.codec_context.format, layout="mono", rate=rate)
        for f in resampler.resample(frame):
            out.mux(stream.encode(f))
        out.mux(stream.encode(None))
    return buf.getvalue()


@pytest.mark.parametrize("fmt, codec, rate", [("wav", "pcm_s16le", 44100), ("flac", "flac", 22050),
                                               ("ogg", "libopus", 48000), ("webm", "libopus", 48000),
                                               ("mp3", "libmp3lame", 44100), ("ipod", "aac", 44100)])
def test_common_formats_decode_to_16_khz(fmt, codec, rate):
    av = pytest.importorskip("av")  # the `audio` extra

    if codec not in av.codecs_available:
        pytest.skip(f"this FFmpeg build has no {codec} encoder")
    tone = np.sin(2 * math.pi * 440 * np.arange(rate) / rate).astype(np.float32) * 0.5  # 1 s
    samples = decode_audio(_encode(fmt, codec, rate, tone), max_seconds=60)
    assert samples.dtype == np.float32 and abs(samples.size - 16000) < 1600  # codec padding/priming
    assert 0.2 < float(np.abs(samples).max()) <= 1.0


def test_undecodable_empty_and_long_audio():
    pytest.importorskip("av")
    clip = CLIP.read_bytes()
    assert abs(decode_audio(clip, 60).size / 16000 - 6.93) < 0.05
    for bad in (b"", b"not audio at all" * 64, clip[:44]):
        with pytest.raises(AudioDecodeError):
            decode_audio(bad, 60)
    with pytest.raises(AudioTooLong):
        decode_audio(clip, 2.0)


def _transcript() -> Transcript:
    t = Transcript(text="Hello there. Bye.", language="en", language_probability=0.9, duration_s=3.0)
    t.add("segment", {"id": 0, "seek": 0, "start": 0.0, "end": 1.5, "text": " Hello there.", "tokens": [1],
                      "temperature": 0.0, "avg_logprob": -0.1, "compression_ratio": 1.0, "no_speech_prob": 0.0,
                      "words": [{"word": " Hello", "start": 0.0, "end": 0.6, "probability": 0.9},
                                {"word": " there.", "start": 0.5, "end": 1.5, "probability": 0.8}]})
    t.add("segment", {"id": 1, "seek": 0, "start": 1.4, "end": 3.2, "text": " Bye.", "tokens": [2],
                      "temperature": 0.0, "avg_logprob": -0.1, "compression_ratio": 1.0, "no_speech_prob": 0.0,
                      "words": []})
    return t


def test_absurd_sample_rates_are_refused_at_once():
    """Found by benchmarks/fuzz.py audio (tests/data/fuzz/audio): a WAV header claiming 167 MHz
    made a 2 KB upload resample for 42 s in 1.4 GB."""
    import struct
    import time

    header = b"RIFF" + struct.pack("<I", 36 + 4000) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 0x0A005622,
                                                                              44100, 2, 16)
    wav = header + b"data" + struct.pack("<I", 4000) + bytes(4000)
    start = time.monotonic()
    with pytest.raises(AudioDecodeError, match="unsupported audio"):
        decode_audio(wav, 60)
    assert time.monotonic() - start < 1.0
    ok = header.replace(struct.pack("<I", 0x0A005622), struct.pack("<I", 16000)) + b"data" + struct.pack("<I", 4000) \
        + bytes(4000)
    assert decode_audio(ok, 60).size == 2000


def test_subtitles_and_verbose_json():
    t = _transcript()
    assert srt_text(t) == "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n2\n00:00:01,500 --> 00:00:03,000\nBye.\n\n"
    assert vtt_text(t) == "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n00:00:01.500 --> 00:00:03.000\nBye.\n"
    body = verbose_json_body(t, "transcribe", words=True)
    assert [s["start"] for s in body["segments"]] == [0.0, 1.5] and body["segments"][1]["end"] == 3.0
    assert body["words"] == [{"word": "Hello", "start": 0.0, "end": 0.6}, {"word": "there.", "start": 0.6, "end": 1.5}]
    assert "words" not in verbose_json_body(t, "transcribe", words=False)
    assert render(t, "text", "transcribe", False) == (b"Hello there. Bye.\n", "text/plain; charset=utf-8")


def test_audio_settings_and_lane_specs(tmp_path, monkeypatch):
    from gateway.audio.requests import MULTIPART_OVERHEAD_BYTES, audio_body_max_bytes
    from gateway.serve.lanes import AUDIO_CTX_SIZE, lane_specs, model_kind
    from gateway.server.config import ConfigError, GatewayConfig, ModelEntry

    for bad in ({"max_audio_bytes": 10}, {"audio_threads": -1}, {"max_audio_s": 0.0}):
        with pytest.raises(ConfigError):
            GatewayConfig(**bad)
    config = GatewayConfig(max_audio_bytes=5 << 20, max_body_bytes=1 << 20)
    assert audio_body_max_bytes(config) == (5 << 20) + MULTIPART_OVERHEAD_BYTES
    model_dir = tmp_path / "whisper"
    model_dir.mkdir()
    for name in ("model.bin", "config.json", "tokenizer.json"):
        (model_dir / name).write_bytes(b"x")
    assert model_kind(str(model_dir)) == "audio" and model_kind(str(tmp_path / "m.gguf")) == "text"
    monkeypatch.setattr("gateway.server.config.available_cores", lambda: 8)
    config = GatewayConfig(models=(ModelEntry("w", str(model_dir)), ModelEntry("t", "synthetic:step_us=1")),
                           parallel=4)
    specs = {s.name: s for s in lane_specs(config, {"w": str(model_dir), "t": "synthetic:step_us=1"})}
    assert (specs["w"].kind, specs["w"].num_slots, specs["w"].threads, specs["w"].ctx_size) == ("audio", 1, 4, AUDIO_CTX_SIZE)
    assert (specs["t"].kind, specs["t"].threads) == ("text", 4)
    config = GatewayConfig(models=config.models, audio_threads=2, threads=1)
    assert (config.audio_lane_threads(), config.lane_threads()) == (2, 1)


def test_openapi_operations_follow_the_form_tables():
    from gateway.audio.openapi import operations
    from gateway.audio.requests import RESPONSE_FORMATS

    ops = operations(lenient=False)
    assert set(ops) == {("post", "/v1/audio/transcriptions"), ("post", "/v1/audio/translations")}
    schema = ops[("post", "/v1/audio/transcriptions")]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert schema["required"] == ["file", "model"] and schema["additionalProperties"] is False
    assert schema["properties"]["response_format"]["enum"] == list(RESPONSE_FORMATS)
    assert operations(lenient=True)[("post", "/v1/audio/translations")]["requestBody"]["content"][
        "multipart/form-data"]["schema"]["additionalProperties"] is True
