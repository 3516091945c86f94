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

import asyncio

from sanic.exceptions import PayloadTooLarge
from sanic.response import HTTPResponse

from gateway.admission import QueueFull, QueueTimeout
from gateway.audio.decode import AudioDecodeError, AudioTooLong, decode_audio
from gateway.audio.formats import Transcript, delta_framing, done_event, render
from gateway.audio.requests import AudioRequest, audio_body_max_bytes, parse_audio_form
from gateway.backend import CONTENT, ChoiceDone, LaneError, SERVING_STATES
from gateway.control import cancelled_error, outcome_for
from gateway.cors import cors_headers
from gateway.errors import APIError, invalid, server_busy, unavailable
from gateway.generation import Generation, GenerationCancelled, GenerationFailed, Submission, next_submission_id
from gateway.relay import SseSender, WriteStalled, ending_stream
from gateway.request_ids import HEADER as REQUEST_ID_HEADER
from gateway.tracking import RequestTracker
from lanes.api import TranscriptPart
from lanes.audio import pcm
from lanes.audio.records import AudioJob


class AudioGeneration(Generation):
    """A Generation whose one submission is a transcription job (admission, abort and
    cancellation are Generation's)."""

    def __init__(self, pool, admission, model: str, job: AudioJob, framings: list) -> None:
        super().__init__(pool, admission, model, [Submission([], None, 1, framings, 0, keep_text=bool(framings))])
        self._job = job

    def _submit(self, s: Submission):
        return self._pool.submit_audio(self._model, self._job, framings=s.framings, collect=not s.framings,
                                       keep_text=s.keep_text)


def _lane_failure(exc: Exception, retry_after_s: int) -> APIError:
    failure = Generation.failed(exc)
    if isinstance(exc, GenerationCancelled):
        return cancelled_error()
    if failure.code == "bad_request":
        return invalid(failure.message, param="language")
    return unavailable(failure.message, retry_after_s, code=failure.code)


def _admission_error(state, model: str, detail: str) -> APIError:
    if any(s.state in SERVING_STATES for s in state.statuses() if s.model == model):
        return server_busy(state.config.retry_after_s, model, detail)
    return unavailable(f"model {model!r} has no lane that can serve right now (loading or restarting)",
                       state.config.retry_after_s, code="lane_unavailable")


def _prepare(data: bytes, max_seconds: float, name: str) -> int:
    """Decode + resample + copy into the shared-memory segment (worker thread); → samples."""
    samples = decode_audio(data, max_seconds)
    pcm.write_segment(name, samples)
    return int(samples.size)


async def _run(request, state, tracker, req: AudioRequest, generation: AudioGeneration, task: str,
               headers: dict) -> HTTPResponse | None:
    """The admitted request to its end: one body in the requested format, or the SSE stream."""
    transcript = Transcript()
    retry_after_s = state.config.retry_after_s
    if not req.stream:
        done = None
        try:
            async for _, stream in generation.segments():
                async for item in stream:
                    if type(item) is TranscriptPart:
                        transcript.add(item.kind, item.value)
                    elif type(item) is ChoiceDone:
                        done = item
        except (GenerationFailed, LaneError) as exc:
            raise _lane_failure(exc, retry_after_s) from None
        if done is None or done.finish_reason == "cancelled":
            raise unavailable("the server is shutting down; the request was cancelled", retry_after_s,
                              code="server_shutting_down")
        tracker.choice_done(0, done)
        transcript.text = _unescape(done.text)
        body, content_type = render(transcript, req.response_format, task, req.word_timestamps)
        tracker.finish("success", 200)
        return HTTPResponse(body, status=200, headers=headers, content_type=content_type)

    headers["Cache-Control"] = "no-cache"
    response = await request.respond(headers=headers, content_type="text/event-stream; charset=utf-8")
    sender = SseSender(response, request.transport, state.config.keepalive_interval_s,
                       state.config.write_stall_timeout_s)
    sender.start_keepalive()
    sender.open_direct()
    with ending_stream(request, sender, tracker):
        try:
            async for _, stream in generation.segments():
                sender.attach(stream)
                try:
                    async for item in stream:
                        if type(item) is TranscriptPart:
                            transcript.add(item.kind, item.value)
                        elif type(item) is ChoiceDone:
                            tracker.first_token(stream.first_direct_ns or None)
                            if item.finish_reason == "cancelled":
                                await sender.send(unavailable("the server is shutting down; the request was cancelled",
                                                              retry_after_s, code="server_shutting_down").sse_event())
                                tracker.finish("error", 200, "server_shutting_down")
                                return None
                            tracker.choice_done(0, item)
                            transcript.text = _unescape(item.text)
                            await sender.send(done_event(transcript, item.completion_tokens))
                        else:  # framed deltas that came the queued way (the socket was busy)
                            tracker.first_token()
                            await sender.send(item.data)
                finally:
                    sender.detach()
        except (GenerationFailed, LaneError) as exc:
            error = _lane_failure(exc, retry_after_s)
            await sender.send(error.sse_event())
            tracker.finish(outcome_for(200, error.code), 200, error.code)
            return None
        await response.eof()
        tracker.finish("success", 200)
    return None


def _unescape(escaped: bytes) -> str:
    import orjson

    return orjson.loads(b'"' + escaped + b'"')


async def _serve(request, route: str, translate: bool):
    state = request.app.ctx.state
    request_id = request.ctx.request_id
    tracker = RequestTracker(state, route, request_id, request.ctx.session_id)
    claimed = registered = False
    segment = None
    generation = None
    try:
        with tracker.recorded():
            if state.draining:
                raise unavailable("the server is shutting down", state.config.retry_after_s, code="server_shutting_down")
            content_type = (request.headers.get("content-type") or "").lower()
            if not content_type.startswith("multipart/form-data"):
                raise APIError(415, "send the audio as multipart/form-data", code="unsupported_media_type")
            # A streaming route: the body is read here, under the audio routes' own limit.
            request.stream.request_max_size = audio_body_max_bytes(state.config)
            try:
                await request.receive_body()
            except PayloadTooLarge:
                raise APIError(413, f"the upload is larger than {audio_body_max_bytes(state.config)} bytes",
                               code="request_too_large") from None
            req = parse_audio_form(request.form, request.files, lenient=state.config.lenient,
                                   max_audio_bytes=state.config.max_audio_bytes)
            if req.ignored_fields:
                state.log.info("ignored_unknown_fields", request_id=request_id, fields=list(req.ignored_fields)[:16])
            served = state.audio_model(req.model)
            tracker.set_model(served.name, req.stream)
            state.in_flight.claim(request_id)
            claimed = True
            job_id = next_submission_id()
            segment = pcm.segment_name(state.pool.run_id, job_id)
            try:
                num_samples = await asyncio.to_thread(_prepare, req.audio, state.config.max_audio_s, segment)
            except AudioDecodeError as exc:
                segment = None
                raise invalid(str(exc), param="file", code="invalid_audio") from None
            except AudioTooLong as exc:
                segment = None
                raise APIError(413, str(exc), param="file", code="audio_too_long") from None
            except OSError as exc:  # /dev/shm full (ENOSPC) or out of names
                raise unavailable(f"no shared memory for this audio now ({exc.strerror}); retry later or "
                                  "enlarge /dev/shm", state.config.retry_after_s, code="shm_full") from None
            job = AudioJob(job_id, segment, num_samples, translate=translate, word_timestamps=req.word_timestamps,
                           language=req.language, prompt=req.prompt, temperature=req.temperature)
            framings = [(0, CONTENT, *delta_framing())] if req.stream else []
            generation = AudioGeneration(state.pool, state.admission, served.name, job, framings)
            state.control.register(request_id, served.name, generation.abort)
            registered = True
            try:
                await generation.start()
            except GenerationCancelled:
                generation = None
                raise cancelled_error() from None
            except QueueFull:
                generation = None
                raise _admission_error(state, served.name, "its queue is full") from None
            except QueueTimeout:
                generation = None
                raise _admission_error(
                    state, served.name, f"no slot freed up within {state.config.queue_timeout_s:g} s in the queue") from None
            tracker.admitted()
            state.metrics.active.labels(served.name).inc()
            try:
                headers = {REQUEST_ID_HEADER: request_id,
                           **cors_headers(state.config.cors_origins, request.headers.get("origin"))}
                answer = await _run(request, state, tracker, req, generation,
                                    "translate" if translate else "transcribe", headers)
                generation = None
                return answer
            finally:
                state.metrics.active.labels(served.name).dec()
    except WriteStalled:
        return None
    finally:
        if generation is not None:
            generation.cancel()  # disconnect or failure: the lane stops at its next segment
        if segment is not None:
            pcm.unlink_segment(segment)  # the lane copied what it needs (or never will)
        if registered:
            state.control.unregister(request_id)
        if claimed:
            state.in_flight.release(request_id)


async def transcriptions(request):
    return await _serve(request, "transcriptions", translate=False)


async def translations(request):
    return await _serve(request, "translations", translate=True)
