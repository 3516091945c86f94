"""Entry point of an audio lane: `python -m lanes.audio.lane_process '<json config>'`.

Same contract as the text lane (lanes/lane_process.py): spawned by the pool with exec, dies with
its parent, attaches the two rings the pool created, loads the model, sends HELLO, then serves
AUDIO_REQUEST / CANCEL / SHUTDOWN and answers DELTA, TRANSCRIPT, DONE and ERROR. The record
layouts come from csrc/ring/wire.h through lanes._ring (HELLO/DELTA/DONE/ERROR encoders) and
lanes.audio.records; every ring index operation happens in lanes._ring.

Threads: the main thread reads the request ring, beats the heartbeat and sets cancel flags; one
worker thread runs the transcriptions (CTranslate2 releases the GIL while it computes, so the
main thread stays responsive). The output ring has one producer lock shared by both.
"""
from __future__ import annotations

import collections
import json
import os
import signal
import sys
import threading
import time

import posix_ipc

from lanes import _ring, wire
from lanes.audio import pcm, transcriber
from lanes.audio.records import AudioJob, decode_audio_request, encode_transcript
from lanes.lane_process import (EXIT_LOAD_FAILED, EXIT_OK, EXIT_PARENT_GONE, StopRequest, _open_fd,
                                 set_parent_death_signal)

IDLE_WAIT_S = 0.25       # longest sleep between heartbeats
FULL_RING_RETRY_S = 0.002


class Output:
    """The output ring's producer, shared by the two threads."""

    def __init__(self, writer, stop: threading.Event):
        self._writer = writer
        self._lock = threading.Lock()
        self._stop = stop

    def write(self, rtype: int, payload: bytes) -> bool:
        """Blocks while the ring is full (the gateway drains it); False once the lane stops."""
        while True:
            with self._lock:
                if self._writer.write(rtype, payload):
                    return True
            if self._stop.wait(FULL_RING_RETRY_S):
                return False

    def heartbeat(self) -> None:
        self._writer.heartbeat()

    def error(self, request_id: int, code: str, message: str) -> None:
        self.write(wire.ERROR, _ring.encode_error_header(request_id, wire.ERROR_CODES[code]) + message.encode())

    def done(self, request_id: int, finish: str, num_tokens: int, prefill_ns: int, decode_ns: int) -> None:
        self.write(wire.DONE, _ring.encode_done(request_id, 0, wire.FINISH_CODES[finish], 0, num_tokens, 0,
                                                wire.DONE_LAST_CHOICE, prefill_ns, decode_ns))

    def delta(self, request_id: int, text: str) -> None:
        self.write(wire.DELTA, _ring.encode_delta_header(request_id, 0, wire.CONTENT, 1, time.monotonic_ns())
                   + text.encode("utf-8"))


class Worker:
    """Runs queued jobs one at a time; cancel() marks the running or a queued job."""

    def __init__(self, model, out: Output, stop: threading.Event):
        self._model = model
        self._out = out
        self._stop = stop
        self._jobs: collections.deque[AudioJob] = collections.deque()
        self._cancelled: set[int] = set()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="audio-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: AudioJob) -> None:
        with self._cond:
            self._jobs.append(job)
            self._cond.notify()

    def cancel(self, request_id: int) -> None:
        with self._cond:
            self._cancelled.add(request_id)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _next(self) -> AudioJob | None:
        with self._cond:
            while not self._jobs and not self._stop.is_set():
                self._cond.wait(IDLE_WAIT_S)
            return None if self._stop.is_set() else self._jobs.popleft()

    def _loop(self) -> None:
        while (job := self._next()) is not None:
            try:
                self._run(job)
            except Exception as exc:  # the request fails, the lane keeps serving
                self._out.error(job.request_id, "engine_error", f"transcription failed: {type(exc).__name__}: {exc}")
            with self._cond:
                self._cancelled.discard(job.request_id)

    def _is_cancelled(self, request_id: int) -> bool:
        return request_id in self._cancelled or self._stop.is_set()

    def _run(self, job: AudioJob) -> None:
        rid, out = job.request_id, self._out
        if self._is_cancelled(rid):
            out.done(rid, "cancelled", 0, 0, 0)
            return
        if job.language and job.language not in self._model.supported_languages:
            out.error(rid, "bad_request", f"language {job.language!r} is not one this model knows")
            return
        try:
            samples = pcm.read_segment(job.shm_name, job.num_samples)
        except (OSError, ValueError, posix_ipc.Error) as exc:
            out.error(rid, "bad_request", f"cannot read the request's audio: {exc}")
            return
        options = transcriber.transcribe_options(job.language, job.prompt, job.temperature, job.translate,
                                                 job.word_timestamps)

        def on_segment(text: str, segment: dict) -> None:
            if text:
                out.delta(rid, text)
            out.write(wire.TRANSCRIPT, encode_transcript(rid, "segment", segment))

        outcome = transcriber.run(self._model, samples, options,
                                  lambda info: out.write(wire.TRANSCRIPT, encode_transcript(rid, "info", info)),
                                  on_segment, lambda: self._is_cancelled(rid))
        first = outcome.first_segment_ns or outcome.total_ns
        out.done(rid, outcome.finish, outcome.num_tokens, first, outcome.total_ns - first)


def _serve(reader, wake, out: Output, worker: Worker, stop: threading.Event, signals: StopRequest,
           parent_pid: int) -> None:
    """Phases per pass: 1 heartbeat; 2 read what the gateway sent; 3 sleep on the wake semaphore
    once the ring is empty (armed), at most IDLE_WAIT_S so the heartbeat keeps going. A signal only
    marks `signals` (its handler takes no lock); this loop turns that into the threads' stop event."""
    while not stop.is_set():
        out.heartbeat()
        if os.getppid() != parent_pid or signals.requested:
            stop.set()
            break
        for rtype, payload in reader.read_batch(64):
            if rtype == wire.AUDIO_REQUEST:
                try:
                    worker.submit(decode_audio_request(payload))
                except ValueError as exc:
                    rid = int.from_bytes(payload[:8], "little") if len(payload) >= 8 else 0
                    out.error(rid, "protocol_error", f"undecodable AUDIO_REQUEST: {exc}")
            elif rtype == wire.CANCEL:
                worker.cancel(int.from_bytes(payload[:8], "little"))
            elif rtype == wire.SHUTDOWN:
                stop.set()
            elif len(payload) >= 8:  # a text REQUEST (or anything else) has no meaning here
                out.error(int.from_bytes(payload[:8], "little"), "protocol_error",
                          f"an audio lane cannot serve record type {rtype}")
        if stop.is_set():
            break
        if not reader.arm():
            try:
                wake.acquire(IDLE_WAIT_S)
            except (posix_ipc.BusyError, posix_ipc.SignalError):
                pass
    worker.wake()


def run(config: dict) -> int:
    parent_pid = config["parent_pid"]
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent_pid:
        return EXIT_PARENT_GONE
    stop = threading.Event()
    signals = StopRequest()  # lock-free handler (lanes/lane_process.py says why); _serve sets `stop`
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signals.on_signal)
    ch = config["channels"]
    request_fd, output_fd = _open_fd(ch["request_name"]), _open_fd(ch["output_name"])
    try:
        reader = _ring.RingReader(request_fd, ch["request_segment_bytes"])
        writer = _ring.RingWriter(output_fd, ch["output_segment_bytes"], ch["doorbell"], ch["bell_fd"],
                                  ch["bell_sem_name"])
    finally:
        os.close(request_fd)
        os.close(output_fd)
    wake = posix_ipc.Semaphore(ch["wake_sem_name"])
    out = Output(writer, stop)
    out.heartbeat()
    start_ns = time.monotonic_ns()
    try:
        model = transcriber.load_model(config["path"], config["threads"])
        n_vocab = int(model.hf_tokenizer.get_vocab_size())
    except Exception as exc:
        out.error(0, "load_failed", f"cannot load {config['path']!r}: {type(exc).__name__}: {exc}")
        return EXIT_LOAD_FAILED
    if stop.is_set() or signals.requested:
        return EXIT_OK
    # One request at a time per lane (num_slots 1): a transcription uses all of the lane's threads.
    out.write(wire.HELLO, _ring.encode_hello(os.getpid(), transcriber.MAX_TARGET_TOKENS, n_vocab,
                                             time.monotonic_ns() - start_ns, 0, 1, 1, 0))
    worker = Worker(model, out, stop)
    worker.start()
    _serve(reader, wake, out, worker, stop, signals, parent_pid)
    return EXIT_OK if os.getppid() == parent_pid else EXIT_PARENT_GONE


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv if argv is None else argv
    code = run(json.loads(argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the worker may be inside a native call: do not wait for it


if __name__ == "__main__":
    main()
