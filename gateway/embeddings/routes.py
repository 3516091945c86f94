"""POST /v1/embeddings (OpenAI) and POST /api/embed, /api/embeddings (Ollama): adapters of the
request pipeline.

Inputs go to the lane as one embedding request per group of ≤ 128 inputs and ≤ n_ctx tokens
(lanes.wire REQUEST_EMBED): the lane runs each input as its own prefill-only sequence in the same
batches as generation, and each group takes one admission entry, like a request with n choices.
"""
from __future__ import annotations

import time

import orjson

from gateway.embeddings.requests import (check_dimensions, ollama_embed_body, ollama_legacy_body, openai_body,
                                         pack_groups, parse_ollama, parse_openai, shaped, token_inputs)
from gateway.http.body import parse_json_object
from gateway.http.errors import APIError, invalid, unavailable
from gateway.ollama import errors as ollama_errors
from gateway.serve.generation import EmbeddingSubmission
from gateway.serve.handler import Adapter, Job, Parsed, route_handler
from gateway.serve.lanes import MAX_LANE_CHOICES, Embedding
from gateway.serve.output import Output


class EmbeddingOutput(Output):
    def __init__(self, retry_after_s: int, num_inputs: int, answer) -> None:
        """answer(vectors, prompt_tokens, total_ns) → the protocol's JSON-able body."""
        super().__init__(retry_after_s)
        self.results: list[Embedding | None] = [None] * num_inputs
        self.answer = answer

    def collect(self, choice: int, item) -> None:
        if type(item) is Embedding:
            self.results[choice] = item

    def body(self, tracker) -> tuple[bytes, str]:
        if any(r is None for r in self.results):
            raise unavailable("the lane ended the request without every embedding", self.retry_after_s,
                              code="lane_error")
        total_ns = time.perf_counter_ns() - tracker.timing_ns()[0]
        return orjson.dumps(self.answer(self.results, tracker.record.prompt_tokens, total_ns)), "application/json"

    def failure(self, code: str, message: str) -> APIError:
        if code == "bad_request":
            return invalid(f"the model refused an input: {message}", param="input")
        return super().failure(code, message)


class _Embed(Adapter):
    def __init__(self, route: str, parse_body, respond, *, ollama: bool) -> None:
        """parse_body(body, config) → EmbedRequest; respond(req, served, vectors, prompt_tokens,
        total_ns) → JSON-able answer."""
        self.route = route
        self.parse_body = parse_body
        self.respond = respond
        self.ollama = ollama

    async def parse(self, request, state) -> Parsed:
        # Ollama reads the body as JSON whatever its Content-Type (its docs' curl examples send none).
        content_type = None if self.ollama else request.headers.get("content-type")
        body = parse_json_object(request.body, content_type, state.config.max_json_depth)
        req = self.parse_body(body, state.config)
        served = ollama_errors.served_model(state, req.model) if self.ollama else state.text_model(req.model)
        check_dimensions(req, served.n_embd)
        return Parsed(served.name, False, req, tuple(req.ignored_fields or ()))

    def plan(self, state, p: Parsed) -> Job:
        req, served = p.fields, state.models[p.model]
        inputs = token_inputs(req, served.text, served.n_ctx, ollama=self.ollama)

        def answer(results, prompt_tokens: int, total_ns: int):
            vectors = [shaped(r.vector, req.dimensions) for r in results]
            return self.respond(req, served, vectors, prompt_tokens, total_ns)

        submissions = [EmbeddingSubmission([], None, len(group), [], first, inputs=group)
                       for first, group in pack_groups(inputs, served.n_ctx, MAX_LANE_CHOICES)]
        return Job(submissions, EmbeddingOutput(state.config.retry_after_s, len(inputs), answer))

    def error_response(self, request_id, error):
        if self.ollama:
            return ollama_errors.error_response(request_id, error)
        return super().error_response(request_id, error)


openai_embeddings = route_handler("openai_embeddings", _Embed(
    "embeddings", lambda body, config: parse_openai(body, lenient=config.lenient),
    lambda req, served, vectors, prompt_tokens, _ns: openai_body(served.name, vectors, req.encoding_format, prompt_tokens),
    ollama=False))
ollama_embed = route_handler("ollama_embed", _Embed(
    "ollama_embed", lambda body, config: parse_ollama(body, legacy=False),
    lambda req, served, vectors, prompt_tokens, ns: ollama_embed_body(req.model, vectors, prompt_tokens, ns),
    ollama=True))
ollama_embeddings = route_handler("ollama_embeddings", _Embed(
    "ollama_embeddings", lambda body, config: parse_ollama(body, legacy=True),
    lambda req, served, vectors, prompt_tokens, ns: ollama_legacy_body(vectors), ollama=True))
