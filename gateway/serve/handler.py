"""The one request pipeline: every protocol's generation, embedding and audio routes run here.

A protocol supplies an Adapter — `parse` (HTTP request → Parsed: model, stream, its own fields),
`plan` (→ Job: the lane submissions and the Output that frames the answer) and `error_response`
(its error shape) — and this module does everything else, once, in this order, so that bad
requests never touch a lane:

  1. refuse while draining          5. register for cancel (POST /stop, DELETE /v1/requests/{id})
  2. parse and look up the model    6. admit: a free slot, else the bounded queue (429 / 503)
  3. claim the request id           7. answer: open the stream and relay it, or collect the body
  4. plan (tokenize) — off the event loop for large bodies and images (the tokenizer and the vision
     encoder release the GIL)

and, whatever ends it: the outcome recorded once (records, metrics, log), the lane freed through
the lane protocol on a disconnect or failure, the id released. Only this module opens a response
(gateway.serve.response.ResponseStream.open), so no writer reaches a socket before its status line.
"""
from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Awaitable, Callable

from sanic.response import HTTPResponse

from gateway.http.cors import cors_headers
from gateway.http.error_handler import error_response
from gateway.http.errors import APIError, load_failed, server_busy, unavailable
from gateway.http.request_ids import HEADER as REQUEST_ID_HEADER
from gateway.serve.admission import ModelLoadFailed, NoServingLane, QueueFull, QueueTimeout
from gateway.serve.control import cancelled_error, outcome_for
from gateway.serve.generation import Generation, GenerationCancelled
from gateway.serve.lanes import SERVING_STATES
from gateway.serve.output import Output
from gateway.serve.queued import QueuedStream
from gateway.serve.relay import collect, relay_stream
from gateway.serve.response import ResponseStream, WriteStalled
from gateway.server.tracking import RequestTracker

LARGE_BODY_BYTES = 64 * 1024  # larger bodies are planned (tokenized) in a worker thread


@dataclass(frozen=True)
class Parsed:
    """A request after its protocol's validation: what the pipeline needs, and the rest."""
    model: str  # the served model's name
    stream: bool
    fields: object  # the protocol's own parsed request
    ignored_fields: tuple = ()  # unknown fields dropped under --lenient (logged by name)
    lora: tuple = ()  # LoRA adapters, (id, scale) pairs, for every submission (ServerState.lora_for)
    plan_off_loop: bool = False  # plan in a worker thread whatever the body size (images to decode and encode)


@dataclass
class Job:
    """A planned request: lane submissions and how to answer."""
    submissions: list  # none: answered by output.body() alone (Ollama's load call, no inputs)
    output: Output
    cleanup: Callable[[], None] | None = None  # runs when the request ends, whatever ends it
    before_answer: Callable[[], Awaitable[None]] | None = None  # no submissions: awaited first (Ollama's load call)


class Adapter:
    """A protocol's part of a route. `route` names it in records and metrics."""
    route = ""
    plan_off_loop = False  # plan in a worker thread whatever the body size (audio decoding)

    async def parse(self, request, state) -> Parsed:
        raise NotImplementedError

    def plan(self, state, parsed: Parsed) -> Job:
        raise NotImplementedError

    def error_response(self, request_id: str, error: APIError) -> HTTPResponse:
        """The OpenAI error envelope; other protocols override it."""
        return error_response(request_id, error)


def admission_error(state, model: str, exc: Exception) -> APIError:
    """Why a request got no slot, in one place for every protocol."""
    if isinstance(exc, GenerationCancelled):
        return cancelled_error()
    if isinstance(exc, ModelLoadFailed):
        return load_failed(exc.model, exc.reason)
    retry_after_s = state.config.retry_after_s
    serving = any(s.state in SERVING_STATES for s in state.statuses() if s.model == model)
    if isinstance(exc, NoServingLane) or not serving:
        return unavailable(f"model {model!r} has no lane that can serve right now (loading or restarting)",
                           retry_after_s, code="lane_unavailable")
    if isinstance(exc, QueueTimeout):
        return server_busy(retry_after_s, model, f"no slot freed up within {state.config.queue_timeout_s:g} s in the queue")
    return server_busy(retry_after_s, model, "its queue is full")


async def serve(request, adapter: Adapter):
    """The route handler body of every protocol adapter."""
    run = _Run(request, adapter)
    try:
        with run.tracker.recorded():
            return await run.execute()
    except APIError as exc:
        return adapter.error_response(run.request_id, exc)
    except WriteStalled:
        return None  # recorded as "timeout"; the connection is already aborted
    finally:
        run.release()


def route_handler(name: str, adapter: Adapter):
    """The Sanic route handler of an adapter (`name` becomes the route's name)."""
    async def handle(request):
        return await serve(request, adapter)
    handle.__name__ = handle.__qualname__ = name
    return handle


class _Run:
    """One request through the pipeline; `release` undoes whatever `execute` got to."""

    def __init__(self, request, adapter: Adapter) -> None:
        self.request = request
        self.adapter = adapter
        self.state = request.app.ctx.state
        self.request_id = request.ctx.request_id
        self.tracker = RequestTracker(self.state, adapter.route, self.request_id, request.ctx.session_id)
        self.claimed = self.registered = False
        self.generation: Generation | None = None  # set while a lane may hold work of ours
        self.cleanup: Callable[[], None] | None = None
        self.active_model: str | None = None

    async def execute(self):
        state, request, tracker = self.state, self.request, self.tracker
        # 1. draining: new work is refused (in-flight requests finish)
        if state.draining:
            raise unavailable("the server is shutting down", state.config.retry_after_s, code="server_shutting_down")
        # 2. the protocol validates and names the model
        parsed = await self.adapter.parse(request, state)
        if parsed.ignored_fields:
            state.log.info("ignored_unknown_fields", request_id=self.request_id, fields=list(parsed.ignored_fields)[:16])
        tracker.set_model(parsed.model, parsed.stream, parsed.lora)
        # 3. one request per id in flight (cancel addresses it by id)
        state.in_flight.claim(self.request_id)
        self.claimed = True
        # 4. tokenize and plan
        job = await self._plan(parsed)
        headers = {REQUEST_ID_HEADER: self.request_id, **job.output.headers,
                   **cors_headers(state.config.cors_origins, request.headers.get("origin"))}
        if not job.submissions:
            if job.before_answer is not None:
                await job.before_answer()
            return self._answer_without_lane(job.output, headers)
        if parsed.stream:
            headers["Cache-Control"] = "no-cache"
        # 5. cancellable from here on, queued or running
        self.generation = Generation(state.pool, state.admission, parsed.model, job.submissions)
        tracker.watch(self.generation, job.output.n_per_prompt)  # a cancel's lane work is recorded too
        state.control.register(self.request_id, parsed.model, self.generation.abort)
        self.registered = True
        # 6. admission
        response = await self._admit(parsed, job.output, headers)
        if response is False:
            return None  # ended in-band while queued
        tracker.admitted()
        state.metrics.active.labels(parsed.model).inc()
        self.active_model = parsed.model
        # 7. the answer
        return await self._answer(parsed.stream, job, headers, response)

    def _answer_without_lane(self, out: Output, headers: dict) -> HTTPResponse:
        """Nothing for a lane to do: Ollama's load call, an empty list of inputs."""
        body, content_type = out.body(self.tracker)
        self.tracker.finish("success", 200)
        return HTTPResponse(body, headers=headers, content_type=content_type)

    async def _answer(self, stream: bool, job: Job, headers: dict, response: ResponseStream | None):
        generation, self.generation = self.generation, None  # from here a failure cancels it below
        out = job.output
        try:
            if not stream:
                body, content_type = await collect(generation, out, self.tracker)
                self.tracker.finish("success", 200)
                return HTTPResponse(body, status=200, headers=headers, content_type=content_type)
            opening_sent = response is None  # the status line carries the first submission's opening
            if response is None:
                response = await self._open(headers, out, out.opening(0, job.submissions[0].num_choices))
            await relay_stream(self.request, response, generation, out, self.tracker, opening_sent=opening_sent)
            return None
        except BaseException:
            generation.cancel()  # disconnect or failure: free the lane through the lane protocol
            raise

    async def _plan(self, parsed: Parsed) -> Job:
        adapter = self.adapter
        if adapter.plan_off_loop or parsed.plan_off_loop or len(self.request.body or b"") > LARGE_BODY_BYTES:
            job = await asyncio.to_thread(adapter.plan, self.state, parsed)
        else:
            job = adapter.plan(self.state, parsed)
        self.cleanup = job.cleanup
        if parsed.lora:  # every protocol's submissions run with the request's adapters
            job.submissions = [dataclasses.replace(s, params=dataclasses.replace(s.params, lora=parsed.lora))
                               for s in job.submissions]
        return job

    def _open(self, headers: dict, out: Output, first: bytes = b""):
        config = self.state.config
        return ResponseStream.open(self.request, headers, out.content_type, out.keepalive, config.keepalive_interval_s,
                                   config.write_stall_timeout_s, relay_direct=out.direct, first=first)

    async def _admit(self, parsed: Parsed, out: Output, headers: dict):
        """The response if it was opened while queued, None if not opened yet, False if the
        wait ended without a slot after the response was opened (answered in-band)."""
        generation = self.generation
        queued = QueuedStream(lambda: self._open(headers, out), self.state.config.keepalive_interval_s) \
            if parsed.stream else None
        try:
            await (generation.start() if queued is None else queued.admit(generation))
        except (GenerationCancelled, QueueFull, QueueTimeout, ModelLoadFailed) as exc:
            self.generation = None  # it never reached a lane
            error = admission_error(self.state, parsed.model, exc)
            if queued is None or queued.response is None:
                raise error from None
            await queued.end_with(out.error_frames(error))
            self.tracker.finish(outcome_for(error.status, error.code), 200, error.code)
            return False
        return None if queued is None else queued.response

    def release(self) -> None:
        state = self.state
        if self.generation is not None:
            self.generation.cancel()  # it may hold a slot: the lane frees it at its next step
        if self.active_model is not None:
            state.metrics.active.labels(self.active_model).dec()
        if self.cleanup is not None:
            self.cleanup()
        if self.registered:
            state.control.unregister(self.request_id)
        if self.claimed:
            state.in_flight.release(self.request_id)
