"""Audio benchmark: real-time factor of a 30 s speech clip at 2 threads, through the server
(`/v1/audio/transcriptions`, json, Whisper base on an audio lane with --audio-threads 2) and
through the library alone in this process (faster-whisper on the same model files, same
options, 2 CPU threads, decoding the same file), in alternating rounds of the same run.

Wall time per transcription: upload → answer for the server; file decode + transcription for
the library. Prints one line: both RTFs (wall / audio length, medians) and the server's added
wall time over the library's. The clip: benchmarks/data/speech_30s.flac (espeak-ng speech of a ~75-word script,
made by make_speech_30s.py beside it). Not a repeated sentence: Whisper's repetition check would
re-decode such windows at higher temperatures, with random results.
Usage: python benchmarks/audio_bench.py [--rounds N] [--pause-s S]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import httpx

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from gateway.cli.bench.server import StartedServer  # noqa: E402
from lanes.audio.model_files import whisper_base_path  # noqa: E402
from lanes.audio.transcriber import load_model, transcribe_options  # noqa: E402

CLIP = os.path.join(REPO_ROOT, "benchmarks", "data", "speech_30s.flac")
CLIP_S = 30.0
THREADS = 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause-s", type=float, default=1.0,
                        help="idle time before every timed run, so neither side starts while the other's "
                             "worker threads are still busy")
    args = parser.parse_args()
    from faster_whisper import decode_audio

    model_dir = str(whisper_base_path())
    options = transcribe_options("", "", -1.0, False, False)
    with open(CLIP, "rb") as f:
        data = f.read()
    model = load_model(model_dir, THREADS)

    def library() -> tuple[float, str]:
        start = time.perf_counter()
        segments, _ = model.transcribe(decode_audio(CLIP), **options)
        text = "".join(s.text for s in segments)
        return time.perf_counter() - start, text

    laneserve = StartedServer("whisper=whisper-base", ["--audio-threads", str(THREADS), "--log-level", "warning"],
                              startup_timeout_s=180).start()
    base = laneserve.base_url
    try:
        http = httpx.Client(timeout=300)

        def server() -> tuple[float, str]:
            start = time.perf_counter()
            r = http.post(base + "/v1/audio/transcriptions", files={"file": ("speech_30s.flac", data, "audio/flac")},
                          data={"model": "whisper"})
            r.raise_for_status()
            return time.perf_counter() - start, r.json()["text"]

        library(), server()  # warm-up: first-call allocations on both sides
        lib_s, srv_s = [], []
        for _ in range(args.rounds):
            time.sleep(args.pause_s)
            t, lib_text = library()
            lib_s.append(t)
            time.sleep(args.pause_s)
            t, srv_text = server()
            srv_s.append(t)
    finally:
        laneserve.stop()
    lib, srv = statistics.median(lib_s), statistics.median(srv_s)
    same = "same text" if lib_text.strip() == srv_text.strip() else "TEXT DIFFERS"
    print(f"audio_bench: {CLIP_S:.0f} s clip, {THREADS} threads, {args.rounds} rounds: library RTF {lib / CLIP_S:.3f} "
          f"({lib:.2f} s), server RTF {srv / CLIP_S:.3f} ({srv:.2f} s), server/library {srv / lib:.3f} "
          f"({(srv / lib - 1) * 100:+.1f}% wall), {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
