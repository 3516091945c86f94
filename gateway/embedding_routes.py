"""POST /v1/embeddings (OpenAI) and POST /api/embed, /api/embeddings (Ollama).

Order of work, as for generation, so that bad requests never touch a lane: parse body →
validate fields → look up the model → tokenize and check the context → admit (queue, 429) →
collect one EMBEDDING per input from the lane → answer. Inputs go to the lane as one embedding
request per group of ≤ 128 inputs and ≤ n_ctx tokens (lanes.wire REQUEST_EMBED): the lane runs
each input as its own prefill-only sequence in the same batches as generation, and the group
takes one admission entry, like a request with n choices.
"""
from __future__ import annotations

import asyncio
import time

import orjson
from sanic.response import HTTPResponse

from gateway.admission import QueueFull, QueueTimeout
from gateway.backend import MAX_LANE_CHOICES, SERVING_STATES, ChoiceDone, Embedding, LaneError
from gateway.body import parse_json_object
from gateway.cors import cors_headers
from gateway.embeddings import (EmbedRequest, check_dimensions, ollama_embed_body, ollama_legacy_body, openai_body,
                                pack_groups, parse_ollama, parse_openai, shaped, token_inputs)
from gateway.errors import APIError, invalid, safe_repr, server_busy, unavailable
from gateway.generation import next_submission_id
from gateway.request_ids import HEADER as REQUEST_ID_HEADER
from gateway.tracking import RequestTracker

LARGE_BODY_BYTES = 64 * 1024


def _admission_error(state, model: str, detail: str) -> APIError:
    retry_after_s = state.config.retry_after_s
    if any(s.state in SERVING_STATES for s in state.statuses() if s.model == model):
        return server_busy(retry_after_s, model, detail)
    return unavailable(f"model {model!r} has no lane that can serve right now (loading or restarting)",
                       retry_after_s, code="lane_unavailable")


async def _admit(state, model: str, group: list[list[int]]):
    try:
        return await state.admission.admit(
            model, lambda: state.pool.submit_embeddings(model, group, next_submission_id()))
    except QueueFull:
        raise _admission_error(state, model, "its queue is full") from None
    except QueueTimeout:
        raise _admission_error(
            state, model, f"no slot freed up within {state.config.queue_timeout_s:g} s in the queue") from None


async def compute(state, model: str, inputs: list[list[int]], tracker) -> list[Embedding]:
    """Every input's Embedding (vector bytes, prompt tokens), in input order."""
    results: list[Embedding | None] = [None] * len(inputs)
    retry_after_s = state.config.retry_after_s
    for position, (first, group) in enumerate(pack_groups(inputs, state.models[model].n_ctx, MAX_LANE_CHOICES)):
        stream = await _admit(state, model, group)
        if position == 0:
            tracker.admitted()
        try:
            async for item in stream:
                if type(item) is Embedding:
                    results[first + item.choice] = item
                elif type(item) is ChoiceDone:
                    if item.finish_reason == "cancelled":
                        raise unavailable("the server is shutting down; the request was cancelled", retry_after_s,
                                          code="server_shutting_down")
                    tracker.choice_done(first + item.choice, item)
        except LaneError as exc:
            if exc.code == "bad_request":
                raise invalid(f"the model refused an input: {exc.message}", param="input") from None
            raise unavailable(exc.message, retry_after_s, code=exc.code) from None
        finally:
            if not stream.finished:
                stream.cancel()  # disconnect or failure: free the lane's slots
    if any(r is None for r in results):
        raise unavailable("the lane ended the request without every embedding", retry_after_s, code="lane_error")
    return results


async def _serve(request, route: str, parse, respond, *, ollama: bool):
    """Shared body of the three routes: parse(body) → EmbedRequest; respond(req, served, vectors,
    prompt_tokens, total_ns) → JSON-able answer."""
    state = request.app.ctx.state
    request_id = request.ctx.request_id
    tracker = RequestTracker(state, route, request_id, request.ctx.session_id)
    claimed = active_model = None
    start_ns = time.perf_counter_ns()
    try:
        with tracker.recorded():
            if state.draining:
                raise unavailable("the server is shutting down", state.config.retry_after_s, code="server_shutting_down")
            # Ollama reads the body as JSON whatever its Content-Type (its docs' curl examples send none).
            content_type = None if ollama else request.headers.get("content-type")
            body = parse_json_object(request.body, content_type, state.config.max_json_depth)
            req: EmbedRequest = parse(body)
            if req.ignored_fields:
                state.log.info("ignored_unknown_fields", request_id=request_id, fields=list(req.ignored_fields)[:16])
            served = _ollama_model(state, req.model) if ollama else state.text_model(req.model)
            tracker.set_model(served.name, False)
            check_dimensions(req, served.n_embd)
            state.in_flight.claim(request_id)
            claimed = request_id
            if len(request.body) > LARGE_BODY_BYTES:  # the tokenizer releases the GIL
                inputs = await asyncio.to_thread(token_inputs, req, served.text, served.n_ctx, ollama=ollama)
            else:
                inputs = token_inputs(req, served.text, served.n_ctx, ollama=ollama)
            vectors = []
            if inputs:
                state.metrics.active.labels(served.name).inc()
                active_model = served.name
                results = await compute(state, served.name, inputs, tracker)
                vectors = [shaped(r.vector, req.dimensions) for r in results]
            answer = respond(req, served, vectors, tracker.record.prompt_tokens, time.perf_counter_ns() - start_ns)
            tracker.finish("success", 200)
            headers = {REQUEST_ID_HEADER: request_id,
                       **cors_headers(state.config.cors_origins, request.headers.get("origin"))}
            return HTTPResponse(orjson.dumps(answer), status=200, headers=headers, content_type="application/json")
    except APIError as exc:
        if ollama:
            return _ollama_error(request, exc)
        raise
    finally:
        if active_model is not None:
            state.metrics.active.labels(active_model).dec()
        if claimed is not None:
            state.in_flight.release(claimed)


def _ollama_model(state, name: str):
    """Ollama clients name models `name` or `name:latest`; unknown → 404 in Ollama's words."""
    served = state.models.get(name)
    if served is None and name.endswith(":latest"):
        served = state.models.get(name[:-len(":latest")])
    if served is None:
        raise APIError(404, f"model {safe_repr(name)} not found", param="model", code="model_not_found")
    return state.text_model(served.name)


def _ollama_error(request, exc: APIError) -> HTTPResponse:
    """Ollama's error shape: {"error": message} with the same status (and Retry-After)."""
    headers = {REQUEST_ID_HEADER: request.ctx.request_id, **exc.headers}
    return HTTPResponse(orjson.dumps({"error": exc.message}), status=exc.status, headers=headers,
                        content_type="application/json")


async def openai_embeddings(request):
    lenient = request.app.ctx.state.config.lenient
    return await _serve(
        request, "embeddings", lambda body: parse_openai(body, lenient=lenient),
        lambda req, served, vectors, prompt_tokens, _ns: openai_body(served.name, vectors, req.encoding_format,
                                                                     prompt_tokens),
        ollama=False)


async def ollama_embed(request):
    return await _serve(
        request, "ollama_embed", lambda body: parse_ollama(body, legacy=False),
        lambda req, served, vectors, prompt_tokens, ns: ollama_embed_body(req.model, vectors, prompt_tokens, ns),
        ollama=True)


async def ollama_embeddings(request):
    return await _serve(
        request, "ollama_embeddings", lambda body: parse_ollama(body, legacy=True),
        lambda req, served, vectors, prompt_tokens, ns: ollama_legacy_body(vectors),
        ollama=True)
