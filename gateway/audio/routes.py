"""POST /v1/audio/transcriptions and /v1/audio/translations.

Order of work, so that bad uploads never reach a lane: parse the form (400, 413) → look up an
audio model (404; a text model → 400) → decode and resample in a worker thread (400
undecodable/empty, 413 too long) → samples into a shared-memory segment → admit (queue, 429) →
the lane streams content deltas (SSE through the native relay, or collected) and TRANSCRIPT
metadata → answer in the requested format. The segment is unlinked when the request ends,
whatever ends it. Cancellation (disconnect, POST /stop, DELETE /v1/requests/{id}) goes through
the lane protocol like a text generation; the lane stops between decoded segments.
"""
from __future__ import annotations

from sanic.exceptions import PayloadTooLarge

from gateway.audio.decode import AudioDecodeError, AudioTooLong, decode_audio
from gateway.audio.formats import Transcript, delta_framing, done_event, render
from gateway.audio.requests import AudioRequest, audio_body_max_bytes, parse_audio_form
from gateway.http.errors import APIError, invalid, unavailable
from gateway.serve.generation import AudioSubmission, next_submission_id
from gateway.serve.handler import Adapter, Job, Parsed, route_handler
from gateway.serve.lanes import CONTENT, Framing
from gateway.serve.output import Output, unescape
from lanes.api import TranscriptPart
from lanes.audio import pcm
from lanes.audio.records import AudioJob


class TranscriptOutput(Output):
    """SSE `transcript.text.delta` events (framed natively) and one `transcript.text.done`, no
    `[DONE]` (OpenAI sends none on transcription streams); or one body in the requested format."""

    def __init__(self, retry_after_s: int, req: AudioRequest, task: str) -> None:
        super().__init__(retry_after_s)
        self.req = req
        self.task = task
        self.transcript = Transcript()
        self.done = None

    def chunk(self, choice: int, item) -> bytes:
        if type(item) is TranscriptPart:
            self.transcript.add(item.kind, item.value)
            return b""
        return item.data  # framed deltas that came the queued way (the socket was busy)

    def choice_done(self, choice: int, done, tracker, last: bool) -> bytes:
        self.transcript.text = unescape(done.text)
        return done_event(self.transcript, done.completion_tokens)

    def collect(self, choice: int, item) -> None:
        if type(item) is TranscriptPart:
            self.transcript.add(item.kind, item.value)

    def collect_done(self, choice: int, done) -> None:
        self.done = done

    def body(self, tracker) -> tuple[bytes, str]:
        if self.done is None:
            raise unavailable("the lane ended the request without a transcript", self.retry_after_s, code="lane_error")
        self.transcript.text = unescape(self.done.text)
        return render(self.transcript, self.req.response_format, self.task, self.req.word_timestamps)

    def failure(self, code: str, message: str) -> APIError:
        if code == "bad_request":
            return invalid(message, param="language")
        return super().failure(code, message)


def _prepare(data: bytes, max_seconds: float, name: str) -> int:
    """Decode + resample + copy into the shared-memory segment (worker thread); → samples."""
    samples = decode_audio(data, max_seconds)
    pcm.write_segment(name, samples)
    return int(samples.size)


class _Transcribe(Adapter):
    plan_off_loop = True  # decoding and resampling take a while

    def __init__(self, route: str, translate: bool) -> None:
        self.route = route
        self.translate = translate

    async def parse(self, request, state) -> Parsed:
        config = state.config
        content_type = (request.headers.get("content-type") or "").lower()
        if not content_type.startswith("multipart/form-data"):
            raise APIError(415, "send the audio as multipart/form-data", code="unsupported_media_type")
        # A streaming route: the body is read here, under the audio routes' own limit.
        request.stream.request_max_size = audio_body_max_bytes(config)
        try:
            await request.receive_body()
        except PayloadTooLarge:
            raise APIError(413, f"the upload is larger than {audio_body_max_bytes(config)} bytes",
                           code="request_too_large") from None
        req = parse_audio_form(request.form, request.files, lenient=config.lenient,
                               max_audio_bytes=config.max_audio_bytes)
        served = state.audio_model(req.model)
        return Parsed(served.name, req.stream, req, tuple(req.ignored_fields or ()))

    def plan(self, state, p: Parsed) -> Job:
        req, config = p.fields, state.config
        job_id = next_submission_id()
        segment = pcm.segment_name(state.pool.run_id, job_id)
        try:
            num_samples = _prepare(req.audio, config.max_audio_s, segment)
        except AudioDecodeError as exc:
            raise invalid(str(exc), param="file", code="invalid_audio") from None
        except AudioTooLong as exc:
            raise APIError(413, str(exc), param="file", code="audio_too_long") from None
        except OSError as exc:  # /dev/shm full (ENOSPC) or out of names
            pcm.unlink_segment(segment)
            raise unavailable(f"no shared memory for this audio now ({exc.strerror}); retry later or "
                              "enlarge /dev/shm", config.retry_after_s, code="shm_full") from None
        job = AudioJob(job_id, segment, num_samples, translate=self.translate, word_timestamps=req.word_timestamps,
                       language=req.language, prompt=req.prompt, temperature=req.temperature)
        framings = [Framing(0, CONTENT, *delta_framing())] if req.stream else []
        submission = AudioSubmission([], None, 1, framings, 0, keep_text=bool(framings), job=job)
        out = TranscriptOutput(config.retry_after_s, req, "translate" if self.translate else "transcribe")
        # the lane copies the samples when it starts the job (or never will): unlinked at the end
        return Job([submission], out, cleanup=lambda: pcm.unlink_segment(segment))


transcriptions = route_handler("transcriptions", _Transcribe("transcriptions", translate=False))
translations = route_handler("translations", _Transcribe("translations", translate=True))
