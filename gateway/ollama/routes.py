"""POST /api/chat and /api/generate: the Ollama protocol on the shared lanes.

Order of work, as on the OpenAI routes: parse → model → template/tokenize → context check →
admission queue (full → 503, as Ollama answers when its queue is full) → relay. Streams are
NDJSON framed natively by the relay (prefix + escaped text + suffix per delta); the final line
carries done_reason and integer-nanosecond durations; a failure after the first line is an
`{"error": ...}` line. Errors before the stream are `{"error": "..."}` with Ollama's statuses.
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools

import orjson
from sanic.response import HTTPResponse

from gateway.admission import NoServingLane, QueueFull, QueueTimeout
from gateway.backend import CONTENT, REASONING, ChoiceDone, LaneError, ReasoningMarkers, ScoredChunk
from gateway.body import parse_json_object
from gateway.control import CANCELLED_CODE, CANCELLED_STATUS, outcome_for
from gateway.errors import APIError
from gateway.generation import Generation, GenerationCancelled, GenerationFailed, Submission
from gateway.ollama.frames import NDJSON, OllamaFrames, error_line
from gateway.ollama.logprobs import OllamaScores
from gateway.ollama.tools import OllamaToolStream, final_message
from gateway.ollama.requests import (CHAT_FIELDS, GENERATE_FIELDS, OllamaError, OllamaRequest, parse_chat,
                                     parse_generate, unknown_fields)
from gateway.queued_stream import QueuedStream
from gateway.reasoning import check_thinking, render_for_thinking
from gateway.relay import SseSender, WriteStalled, ending_stream
from gateway.request_ids import HEADER as REQUEST_ID_HEADER
from gateway.stream_stats import RequestStats
from gateway.tool_stream import TOOL_TEXT_FRAMING
from gateway.tools import HERMES, chat_for_template, tool_grammar
from gateway.tracking import RequestTracker

LARGE_BODY_BYTES = 64 * 1024


def ollama_errors(handler):
    """Answer APIErrors (ours and the shared parsers') the Ollama way: `{"error": message}`."""
    @functools.wraps(handler)
    async def wrapped(request, *args, **kwargs):
        try:
            return await handler(request, *args, **kwargs)
        except APIError as exc:
            headers = {REQUEST_ID_HEADER: request.ctx.request_id, **exc.headers}
            return HTTPResponse(orjson.dumps({"error": exc.message}), status=exc.status, headers=headers,
                                content_type="application/json; charset=utf-8")
    return wrapped


def served_model(state, name: str):
    """Ollama names carry a tag; ours are plain: "smollm2" and "smollm2:latest" are the same."""
    served = state.models.get(name) or (state.models.get(name[: -len(":latest")]) if name.endswith(":latest") else None)
    if served is None:
        shown = name if len(name) <= 64 and name.isprintable() else "<model>"
        raise OllamaError(404, f"model '{shown}' not found")
    if served.is_audio:
        raise OllamaError(400, f"model '{served.name}' is a speech-to-text model; the Ollama routes serve text "
                          "models (use /v1/audio/transcriptions)")
    return served


def unescape(escaped: bytes) -> str:
    return orjson.loads(b'"' + escaped + b'"')


def _prompt_ids(served, parsed: OllamaRequest, chat: bool) -> tuple[list[int], ReasoningMarkers | None]:
    """The prompt's token ids, and the markers the lane splits thinking at (None: all content)."""
    text = served.text
    if chat:
        messages, kwargs = chat_for_template(list(parsed.messages), {}, parsed.tools, text.supports_tools)
        return render_for_thinking(text, messages, kwargs, parsed.think, param="think", model=served.name)
    if parsed.raw or not text.supports_chat:
        ids = list(parsed.context) + text.encode_prompt(parsed.prompt or "", add_special=not parsed.context)
        markers = check_thinking(text, parsed.think, param="think", model=served.name)
        reasoning = ReasoningMarkers(*markers, False) if markers is not None and parsed.think else None
    else:
        messages = ([{"role": "system", "content": parsed.system}] if parsed.system else []) + \
            [{"role": "user", "content": parsed.prompt or ""}]
        ids, reasoning = render_for_thinking(text, messages, {}, parsed.think, param="think", model=served.name)
        ids = list(parsed.context) + ids
    text.check_token_ids(ids, "context")
    return ids, reasoning


def _max_tokens(num_predict: int | None, prompt_len: int, n_ctx: int) -> int:
    if prompt_len >= n_ctx:
        raise OllamaError(400, f"the input has {prompt_len} tokens; this model's context is {n_ctx} tokens")
    room = n_ctx - prompt_len
    return room if num_predict is None else min(num_predict, room)


CANCELLED_MESSAGE = "the request was cancelled (POST /stop or DELETE /v1/requests/{id})"


def _stats(tracker) -> dict:
    """The final line's counts and integer-ns durations (after tracker.choice_done)."""
    return RequestStats.from_tracker(tracker).ollama_fields()


async def _run(request, chat: bool):
    state = request.app.ctx.state
    request_id = request.ctx.request_id
    tracker = RequestTracker(state, "ollama_chat" if chat else "ollama_generate", request_id,
                             request.ctx.session_id)
    claimed = registered = False
    generation = None
    try:
        with tracker.recorded():
            if state.draining:
                raise OllamaError(503, "the server is shutting down", headers={"Retry-After": str(state.config.retry_after_s)})
            body = parse_json_object(request.body, None, state.config.max_json_depth)
            model = body.get("model")
            if type(model) is not str or not model:
                raise OllamaError(400, "model is required")
            served = served_model(state, model)
            parsed = (parse_chat if chat else parse_generate)(body)
            ignored = unknown_fields(body, CHAT_FIELDS if chat else GENERATE_FIELDS)
            if ignored:
                state.log.info("ignored_unknown_fields", request_id=request_id, fields=list(ignored)[:16])
            tracker.set_model(served.name, parsed.stream)
            frames = OllamaFrames(served.name, chat)
            if (chat and not parsed.messages) or (not chat and not parsed.prompt and not parsed.context):
                # Ollama's load/unload call: our models stay loaded, so it is answered at once.
                tracker.finish("success", 200)
                reason = "unload" if parsed.keep_alive_zero else "load"
                obj = {"model": served.name, "created_at": frames.created_at}
                obj.update({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""})
                obj.update(done_reason=reason, done=True)
                return HTTPResponse(orjson.dumps(obj), headers={REQUEST_ID_HEADER: request_id},
                                    content_type="application/json; charset=utf-8")
            state.in_flight.claim(request_id)
            claimed = True
            if len(request.body) > LARGE_BODY_BYTES:
                ids, reasoning = await asyncio.to_thread(_prompt_ids, served, parsed, chat)
            else:
                ids, reasoning = _prompt_ids(served, parsed, chat)
            if not ids:
                raise OllamaError(400, "the prompt is empty after tokenization")
            params = dataclasses.replace(parsed.params, reasoning=reasoning,
                                         max_tokens=_max_tokens(parsed.num_predict, len(ids), served.n_ctx))
            tools = parsed.tools if chat and parsed.tools is not None and parsed.tools.active else None
            if tools is not None:
                tools = dataclasses.replace(tools, fmt=served.text.tool_format or HERMES)
                params = dataclasses.replace(params, grammar=tool_grammar(tools))
            framings = []
            # logprobs: the lane sends ScoredChunks, framed here (gateway.ollama.logprobs)
            scores = OllamaScores(frames, served.text) if params.logprobs is not None else None
            if tools is not None and scores is not None:
                raise OllamaError(400, "logprobs cannot be combined with tools")
            if parsed.stream and scores is None:
                # With tools the text comes to Python marked (gateway.ollama.tools finds the calls).
                framings.append((0, CONTENT, *(frames.content_framing() if tools is None else TOOL_TEXT_FRAMING)))
                if reasoning is not None:  # every split channel needs a framing (else it falls back to content's)
                    framings.append((0, REASONING, *frames.thinking_framing()))
            submission = Submission(ids, params, 1, framings, 0, keep_text=parsed.stream and not chat)
            generation = Generation(state.pool, state.admission, served.name, [submission])
            state.control.register(request_id, served.name, generation.abort)
            registered = True
            headers = {REQUEST_ID_HEADER: request_id}
            queued = QueuedStream(request, headers, NDJSON, state.config.keepalive_interval_s,
                                  state.config.write_stall_timeout_s, keepalive=frames.keepalive()) \
                if parsed.stream else None
            error = None
            try:
                await (generation.start() if queued is None else queued.admit(generation))
            except GenerationCancelled:
                error = OllamaError(CANCELLED_STATUS, CANCELLED_MESSAGE, code=CANCELLED_CODE)
            except (QueueFull, QueueTimeout) as exc:
                error = OllamaError(503, "the model's lanes are loading or restarting; retry shortly"
                                    if isinstance(exc, NoServingLane) else
                                    "server busy, please try again: every slot is taken and the queue is full",
                                    headers={"Retry-After": str(state.config.retry_after_s)})
            if error is not None:
                generation = None  # it never reached a lane
                if queued is None or queued.sender is None:
                    raise error
                await queued.end_with(error_line(error.message))  # the response was opened while queued
                tracker.finish(outcome_for(error.status, error.code), 200, error.code)
                return None
            tracker.admitted()
            state.metrics.active.labels(served.name).inc()
            try:
                if parsed.stream:
                    await _relay_stream(request, state, generation, frames, tracker, ids, chat, headers, scores,
                                        None if tools is None else OllamaToolStream(frames, tools.fmt), queued.sender)
                    generation = None
                    return None
                obj = await _collect(state, generation, frames, tracker, ids, chat, scores, tools)
                generation = None
                tracker.finish("success", 200)
                return HTTPResponse(orjson.dumps(obj), headers=headers, content_type="application/json; charset=utf-8")
            finally:
                state.metrics.active.labels(served.name).dec()
    except WriteStalled:
        return None  # recorded as "timeout" by the relay; the connection is already aborted
    finally:
        if generation is not None:
            generation.cancel()
        if registered:
            state.control.unregister(request_id)
        if claimed:
            state.in_flight.release(request_id)


def _context(state, served_name: str, ids: list[int], text: str) -> list[int]:
    return ids + state.models[served_name].text.encode_prompt(text, add_special=False)


def _failure_message(exc: Exception) -> str:
    failure = Generation.failed(exc)
    return CANCELLED_MESSAGE if failure.code == CANCELLED_CODE else f"{failure.code}: {failure.message}"


async def _relay_stream(request, state, generation, frames, tracker, ids, chat, headers, scores=None,
                        rewrite=None, sender: SseSender | None = None) -> None:
    """`scores` (gateway.ollama.logprobs.OllamaScores) or `rewrite` (gateway.ollama.tools.OllamaToolStream):
    lines rendered by Python. `sender`: the response was already opened while the request was
    queued (gateway.queued_stream)."""
    if sender is None:
        response = await request.respond(headers=headers, content_type=NDJSON)
        sender = SseSender(response, request.transport, state.config.keepalive_interval_s,
                           state.config.write_stall_timeout_s, keepalive=frames.keepalive())
        sender.start_keepalive()
    if rewrite is None:
        sender.open_direct()
    with ending_stream(request, sender, tracker):
        try:
            await sender.send(b"")  # the headers go out now; the relay writes only after them
            async for _, stream in generation.segments():
                sender.attach(stream)
                try:
                    async for item in stream:
                        if type(item) is ChoiceDone:
                            tracker.first_token(stream.first_direct_ns or None)
                            if item.finish_reason == "cancelled":
                                await sender.send(error_line("the request was cancelled"))
                                tracker.finish("error", 200, "cancelled")
                                return
                            tracker.choice_done(0, item)
                            text = scores.text() if scores is not None else unescape(item.text)
                            context = None if chat else _context(state, frames.model, ids, text)
                            held = scores.held_line() if scores is not None else \
                                rewrite.finish() if rewrite is not None else b""
                            await sender.send(held + frames.final("", item.finish_reason, _stats(tracker), context))
                            continue
                        tracker.first_token()
                        if type(item) is ScoredChunk:
                            data = scores.line(item)
                        else:
                            data = item.data if rewrite is None else rewrite.chunk(item.data)
                        if data:
                            await sender.send(data)
                finally:
                    sender.detach()
        except (GenerationFailed, LaneError) as exc:
            code = Generation.failed(exc).code
            await sender.send(error_line(_failure_message(exc)))
            tracker.finish(outcome_for(200, code), 200, code)
            return
        await sender.eof()
        tracker.finish("success", 200)


async def _collect(state, generation, frames, tracker, ids, chat, scores=None, tools=None) -> dict:
    try:
        async for _, stream in generation.segments():
            async for item in stream:
                if type(item) is ChoiceDone:
                    if item.finish_reason == "cancelled":
                        raise OllamaError(503, "the request was cancelled")
                    tracker.choice_done(0, item)
                    text = scores.text() if scores is not None else unescape(item.text)
                    thinking = scores.thinking() if scores is not None else unescape(item.reasoning)
                    context = None if chat else _context(state, frames.model, ids, text)
                    calls = None
                    if tools is not None:
                        text, calls = final_message(item.text, tools.fmt)
                    obj = frames.final_object(text, item.finish_reason, _stats(tracker), context, thinking or None)
                    if calls:
                        obj["message"]["tool_calls"] = calls
                    if scores is not None:
                        obj["logprobs"] = scores.all_entries()
                    return obj
                if type(item) is ScoredChunk:
                    scores.collect(item)
    except (GenerationFailed, LaneError) as exc:
        code = Generation.failed(exc).code
        status = CANCELLED_STATUS if code == CANCELLED_CODE else \
            503 if code in ("lane_died", "lane_hung", "shutdown") else 500
        raise OllamaError(status, _failure_message(exc), code=code) from None
    raise OllamaError(500, "the lane ended the request without a result")


@ollama_errors
async def chat(request):
    return await _run(request, chat=True)


@ollama_errors
async def generate(request):
    return await _run(request, chat=False)
