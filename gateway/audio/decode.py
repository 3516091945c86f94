"""Uploaded audio → float32 mono 16 kHz samples, with PyAV (FFmpeg's demuxers and decoders: wav,
mp3, m4a/mp4/aac, ogg/opus/vorbis, webm, flac — what phones and browsers record).

Runs in a worker thread (PyAV releases the GIL inside FFmpeg calls). Anything FFmpeg cannot
open or decode, a file without an audio stream and a file that decodes to no samples are all
AudioDecodeError (→ 400); a decoded length beyond the limit is AudioTooLong (→ 413).
"""
from __future__ import annotations

import io

import numpy as np

SAMPLE_RATE_HZ = 16_000
# Above any recording format (DXD is 352.8 kHz). A 2 KB WAV header claiming 167 MHz made the
# resampler run for 42 s and take 1.4 GB (found by benchmarks/fuzz.py audio).
MAX_SOURCE_RATE_HZ = 384_000
MAX_CHANNELS = 64


class AudioDecodeError(ValueError):
    """The upload is not audio we can decode (message is ours, never FFmpeg's bytes)."""


class AudioTooLong(ValueError):
    pass


def decode_audio(data: bytes, max_seconds: float) -> np.ndarray:
    import av

    if not data:
        raise AudioDecodeError("the audio file is empty")
    max_samples = int(max_seconds * SAMPLE_RATE_HZ)
    chunks: list[np.ndarray] = []
    total = 0
    try:
        with av.open(io.BytesIO(data), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise AudioDecodeError("the file has no audio stream")
            stream = container.streams.audio[0]
            codec = stream.codec_context  # None: FFmpeg has no decoder for this stream
            if codec is None:
                raise AudioDecodeError("the audio codec is not supported")
            rate, channels = codec.sample_rate, codec.channels
            if not 0 < rate <= MAX_SOURCE_RATE_HZ or not 0 < channels <= MAX_CHANNELS:
                raise AudioDecodeError(f"unsupported audio: {rate} Hz, {channels} channels")
            resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE_HZ)
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    chunk = out.to_ndarray().reshape(-1)
                    chunks.append(chunk)
                    total += chunk.size
                if total > max_samples:
                    raise AudioTooLong(f"the audio is longer than the limit of {max_seconds:g} s")
            for out in resampler.resample(None):  # flush
                chunks.append(out.to_ndarray().reshape(-1))
    except (AudioDecodeError, AudioTooLong):
        raise
    except (av.FFmpegError, ValueError, OSError, EOFError, IndexError) as exc:
        raise AudioDecodeError(f"the file could not be decoded as audio ({type(exc).__name__})") from None
    samples = np.concatenate(chunks).astype(np.float32, copy=False) if chunks else np.zeros(0, np.float32)
    if samples.size == 0:
        raise AudioDecodeError("the audio file contains no samples")
    if samples.size > max_samples:
        raise AudioTooLong(f"the audio is longer than the limit of {max_seconds:g} s")
    return samples
