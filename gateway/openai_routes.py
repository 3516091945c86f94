"""POST /v1/completions and POST /v1/chat/completions.

Order of work, so that bad requests never touch a lane: parse body → validate fields → look
up the model → tokenize and check the context → admit (LaneBusy → 429) → relay.
"""
from __future__ import annotations

import asyncio
import dataclasses

from sanic.response import HTTPResponse

from gateway.admission import QueueFull, QueueTimeout
from gateway.backend import CONTENT, REASONING, SERVING_STATES, generation_params
from gateway.body import parse_json_object
from gateway.control import cancelled_error, outcome_for
from gateway.cors import cors_headers
from gateway.errors import APIError, invalid, server_busy, unavailable
from gateway.framing import DONE_EVENT, StreamFrames, new_completion_id, now_s
from gateway.generation import Generation, GenerationCancelled, Submission
from gateway.logprobs import request_scores
from gateway.openai_requests import parse_chat, parse_completion
from gateway.reasoning import render_for_thinking
from gateway.queued_stream import QueuedStream
from gateway.relay import SSE_CONTENT_TYPE, WriteStalled, collect, non_stream_response_body, relay_stream
from gateway.stream_stats import RequestStats
from gateway.tool_stream import TOOL_TEXT_FRAMING, ToolStreamRewriter, tool_response_body
from gateway.tools import HERMES, chat_for_template, tool_grammar
from gateway.request_ids import HEADER as REQUEST_ID_HEADER
from gateway.tracking import RequestTracker

LARGE_BODY_BYTES = 64 * 1024


def _max_tokens(requested: int | None, prompt_len: int, n_ctx: int, prompt_param: str) -> int:
    if prompt_len >= n_ctx:
        raise APIError(400, f"the prompt has {prompt_len} tokens; this model's context is {n_ctx} tokens",
                       param=prompt_param, code="context_length_exceeded")
    if requested is not None and requested > n_ctx:
        raise invalid(f"'max_tokens' ({requested}) exceeds the context length ({n_ctx})", param="max_tokens")
    room = n_ctx - prompt_len
    return room if requested is None else min(requested, room)  # capped by the context: ends "length"


def _prompt_ids(state, served, parsed, chat: bool):
    """(token ids per prompt, reasoning markers for the lane or None)."""
    markers = None
    if chat:
        messages, kwargs = chat_for_template(list(parsed.messages), parsed.template_kwargs, parsed.tools,
                                             served.text.supports_tools)
        ids, markers = render_for_thinking(served.text, messages, kwargs, parsed.think,
                                           param=parsed.think_param, model=served.name)
        all_ids = [ids]
    else:
        all_ids = []
        for prompt in parsed.prompts:
            if isinstance(prompt, str):
                all_ids.append(served.text.encode_prompt(prompt))
            else:
                served.text.check_token_ids(prompt, "prompt")
                all_ids.append(list(prompt))
    for ids in all_ids:
        if not ids:
            raise invalid("the prompt is empty after tokenization", param="messages" if chat else "prompt")
    for token, _ in parsed.sampling.logit_bias:
        if token >= served.n_vocab:
            raise invalid(f"logit_bias token id {token} is outside the vocabulary", param="logit_bias")
    return all_ids, markers


def _admission_error(state, model: str, detail: str) -> APIError:
    retry_after_s = state.config.retry_after_s
    lanes = [s for s in state.statuses() if s.model == model]
    if any(s.state in SERVING_STATES for s in lanes):
        return server_busy(retry_after_s, model, detail)
    return unavailable(f"model {model!r} has no lane that can serve right now (loading or restarting)",
                       retry_after_s, code="lane_unavailable")


async def _generate(request, chat: bool):
    state = request.app.ctx.state
    request_id = request.ctx.request_id
    route = "chat" if chat else "completions"
    tracker = RequestTracker(state, route, request_id, request.ctx.session_id)
    claimed = registered = False
    generation = None
    try:
        with tracker.recorded():
            if state.draining:
                raise unavailable("the server is shutting down", state.config.retry_after_s, code="server_shutting_down")
            body = parse_json_object(request.body, request.headers.get("content-type"), state.config.max_json_depth)
            parse = parse_chat if chat else parse_completion
            parsed = parse(body, lenient=state.config.lenient)
            if parsed.ignored_fields:
                state.log.info("ignored_unknown_fields", request_id=request_id, fields=list(parsed.ignored_fields)[:16])
            sampling = parsed.sampling
            tools = parsed.tools if chat and parsed.tools is not None and parsed.tools.active else None
            served = state.text_model(sampling.model)
            if tools is not None:  # the answer follows the model's tool-call format (gateway.tools)
                tools = dataclasses.replace(tools, fmt=served.text.tool_format or HERMES)
                sampling = dataclasses.replace(sampling, grammar=tool_grammar(tools))
            tracker.set_model(served.name, sampling.stream)
            if sampling.n > state.config.max_n:
                raise invalid(f"'n' must be between 1 and {state.config.max_n}", param="n")
            state.in_flight.claim(request_id)
            claimed = True

            if len(request.body) > LARGE_BODY_BYTES:
                # Tokenizing megabytes takes a while; the tokenizer releases the GIL, so a worker
                # thread keeps the event loop (and every other stream) moving meanwhile.
                prompts, markers = await asyncio.to_thread(_prompt_ids, state, served, parsed, chat)
            else:
                prompts, markers = _prompt_ids(state, served, parsed, chat)
            num_choices = len(prompts) * sampling.n
            frames = StreamFrames(new_completion_id(chat), now_s(), served.name, chat, sampling.include_usage)
            echo = not chat and parsed.echo
            # Logprobs and echo: the lane sends ScoredChunks, framed in Python (gateway.logprobs).
            scores = request_scores(frames, served.text, parsed, prompts) \
                if sampling.logprobs is not None or echo else None
            native = sampling.stream and scores is None
            submissions = []
            for p, ids in enumerate(prompts):
                params = generation_params(sampling, _max_tokens(sampling.max_tokens, len(ids), served.n_ctx,
                                                                   "messages" if chat else "prompt"), markers,
                                           prompt_logprobs=echo)
                first = p * sampling.n
                # Tools: content reaches Python marked (gateway.tool_stream) to find the calls in it.
                framings = [(j, CONTENT, *(frames.content_framing(first + j) if tools is None else TOOL_TEXT_FRAMING))
                            for j in range(sampling.n)] \
                    if native else []  # non-stream: the relay collects each choice's escaped text
                if markers is not None and native:
                    framings += [(j, REASONING, *frames.reasoning_framing(first + j)) for j in range(sampling.n)]
                submissions.append(Submission(ids, params, sampling.n, framings, first))

            generation = Generation(state.pool, state.admission, served.name, submissions)
            state.control.register(request_id, served.name, generation.abort)
            registered = True
            headers = {REQUEST_ID_HEADER: request_id, "X-Laneserve-Streaming": "incremental",
                       **cors_headers(state.config.cors_origins, request.headers.get("origin"))}
            if sampling.stream:
                headers["Cache-Control"] = "no-cache"
            queued = QueuedStream(request, headers, SSE_CONTENT_TYPE, state.config.keepalive_interval_s,
                                  state.config.write_stall_timeout_s) if sampling.stream else None
            error = None
            try:
                await (generation.start() if queued is None else queued.admit(generation))
            except GenerationCancelled:
                error = cancelled_error()
            except QueueFull:
                error = _admission_error(state, served.name, "its queue is full")
            except QueueTimeout:
                error = _admission_error(
                    state, served.name, f"no slot freed up within {state.config.queue_timeout_s:g} s in the queue")
            if error is not None:
                generation = None  # it never reached a lane
                if queued is None or queued.sender is None:
                    raise error
                await queued.end_with(error.sse_event() + DONE_EVENT)  # the response was opened while queued
                tracker.finish(outcome_for(error.status, error.code), 200, error.code)
                return None
            tracker.admitted()
            state.metrics.active.labels(served.name).inc()
            try:
                if sampling.stream:
                    await relay_stream(request, generation, frames, tracker, n_per_prompt=sampling.n, headers=headers,
                                       keepalive_interval_s=state.config.keepalive_interval_s,
                                       write_stall_timeout_s=state.config.write_stall_timeout_s,
                                       retry_after_s=state.config.retry_after_s, scores=scores,
                                       rewrite=None if tools is None else ToolStreamRewriter(frames, tools.fmt),
                                       sender=queued.sender)
                    generation = None
                    return None
                results = await collect(generation, num_choices, tracker, n_per_prompt=sampling.n,
                                        retry_after_s=state.config.retry_after_s, scores=scores)
                generation = None
                if tools is None:
                    body_bytes = non_stream_response_body(frames, results, tracker)
                else:
                    rec = tracker.record
                    body_bytes = tool_response_body(frames, results, rec.prompt_tokens, rec.completion_tokens,
                                                    rec.cached_tokens, RequestStats.from_tracker(tracker).openai_body_fields(),
                                                    tools.fmt)
                tracker.finish("success", 200)
                return HTTPResponse(body_bytes, status=200, headers=headers, content_type="application/json")
            finally:
                state.metrics.active.labels(served.name).dec()
    except WriteStalled:
        return None  # recorded as "timeout" by the relay; the connection is already aborted
    finally:
        if generation is not None:
            generation.cancel()  # disconnect or failure: free the lane through the lane protocol
        if registered:
            state.control.unregister(request_id)
        if claimed:
            state.in_flight.release(request_id)


async def completions(request):
    return await _generate(request, chat=False)


async def chat_completions(request):
    return await _generate(request, chat=True)
