"""POST /api/chat and /api/generate: the Ollama adapter of the request pipeline.

parse: the body (JSON whatever its Content-Type, as Ollama reads it) → model (`name[:latest]`)
→ fields (gateway.ollama.requests); plan: template/tokenize (images: in a worker thread) → context check → one lane
submission with NDJSON framings (gateway.ollama.frames). Errors are `{"error": "..."}` with
Ollama's statuses (gateway.ollama.errors).
"""
from __future__ import annotations

import dataclasses

import orjson

from gateway.features.chat_prompt import active_tools, chat_prompt
from gateway.features.reasoning import check_thinking, lane_markers
from gateway.http.body import parse_json_object
from gateway.ollama.errors import error_response, served_model
from gateway.ollama.frames import OllamaFrames
from gateway.ollama.logprobs import OllamaScores
from gateway.ollama.output import OllamaOutput
from gateway.ollama.residency_calls import apply_keep_alive, load_or_unload
from gateway.ollama.requests import (CHAT_FIELDS, GENERATE_FIELDS, OllamaError, OllamaRequest, parse_chat,
                                     parse_generate, unknown_fields)
from gateway.openai.tool_stream import TOOL_REASONING_FRAMING, TOOL_TEXT_FRAMING
from gateway.serve.generation import Submission
from gateway.serve.handler import Adapter, Job, Parsed, route_handler
from gateway.serve.lanes import CONTENT, REASONING, Framing, ReasoningMarkers
from gateway.serve.output import Output
from gateway.vision.parts import with_markers
from gateway.vision.request import check_images_served


def _prompt_ids(served, parsed: OllamaRequest, chat: bool) -> tuple[list[int], ReasoningMarkers | None, tuple]:
    """The prompt's token ids, the markers the lane splits thinking at (None: all content), and its images."""
    text = served.text
    if chat:
        return chat_prompt(served, list(parsed.messages), parsed.template_kwargs, parsed.tools, parsed.think, "think",
                           images=parsed.images, param="messages")
    if parsed.raw or not text.supports_chat:
        if parsed.images:
            raise OllamaError(400, "images need the model's chat template: send raw: false")
        ids = list(parsed.context) + text.encode_prompt(parsed.prompt or "", add_special=not parsed.context)
        markers = check_thinking(text, parsed.think, param="think", model=served.name)
        reasoning = lane_markers(markers, parsed.think) if markers is not None and parsed.think else None
        images = ()
    else:
        messages = ([{"role": "system", "content": parsed.system}] if parsed.system else []) + \
            [{"role": "user", "content": with_markers(parsed.prompt or "", len(parsed.images))}]
        ids, reasoning, images = chat_prompt(served, messages, parsed.template_kwargs, None, parsed.think, "think",
                                             images=parsed.images, param="prompt")
        if parsed.context and ids and ids[0] == text.tokenizer.bos_id and text.tokenizer.add_bos:
            ids = ids[1:]  # the earlier exchange's ids begin with BOS already (as the raw path leaves it out)
            images = tuple(dataclasses.replace(im, pos=im.pos - 1) for im in images)
        shift = len(parsed.context)  # an earlier exchange's ids go first: the images move with the text
        ids = list(parsed.context) + ids
        images = tuple(dataclasses.replace(im, pos=im.pos + shift) for im in images)
    text.check_token_ids(ids, "context")
    return ids, reasoning, images


def _max_tokens(num_predict: int | None, prompt_len: int, n_ctx: int) -> int:
    if prompt_len >= n_ctx:
        raise OllamaError(400, f"the input has {prompt_len} tokens; this model's context is {n_ctx} tokens")
    room = n_ctx - prompt_len
    return room if num_predict is None else min(num_predict, room)


class _LoadAnswer(Output):
    """Ollama's load/unload call (no messages / no prompt): answered once the model is loaded, or
    (keep_alive 0) unloaded (gateway.ollama.residency_calls)."""

    def __init__(self, served, parsed: OllamaRequest, frames: OllamaFrames, chat: bool) -> None:
        super().__init__(0)
        obj = {"model": served.name, "created_at": frames.created_at}
        obj.update({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""})
        obj.update(done_reason="unload" if parsed.keep_alive_s == 0 else "load", done=True)
        self.answer = orjson.dumps(obj)

    def body(self, tracker) -> tuple[bytes, str]:
        return self.answer, "application/json; charset=utf-8"


class _Generate(Adapter):
    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.route = "ollama_chat" if chat else "ollama_generate"

    async def parse(self, request, state) -> Parsed:
        body = parse_json_object(request.body, None, state.config.max_json_depth)
        model = body.get("model")
        if type(model) is not str or not model:
            raise OllamaError(400, "model is required")
        served = served_model(state, model)
        parsed = (parse_chat if self.chat else parse_generate)(body)
        apply_keep_alive(state, served.name, parsed.keep_alive_s)
        ignored = unknown_fields(body, CHAT_FIELDS if self.chat else GENERATE_FIELDS)
        requested = model if served.name == model or not model.endswith(":latest") else model[: -len(":latest")]
        check_images_served(served, parsed.images, "images")
        return Parsed(served.name, parsed.stream, parsed, tuple(ignored), state.lora_for(requested),
                      plan_off_loop=bool(parsed.images))

    def plan(self, state, p: Parsed) -> Job:
        chat, parsed, served = self.chat, p.fields, state.models[p.model]
        frames = OllamaFrames(parsed.model, chat)  # the name as requested ("smollm2:latest"), as Ollama echoes it
        if (chat and not parsed.messages) or (not chat and not parsed.prompt and not parsed.context):
            return Job([], _LoadAnswer(served, parsed, frames, chat),
                       before_answer=lambda: load_or_unload(state, served.name, parsed.keep_alive_s == 0))
        ids, reasoning, images = _prompt_ids(served, parsed, chat)
        if not ids:
            raise OllamaError(400, "the prompt is empty after tokenization")
        params = dataclasses.replace(parsed.params, reasoning=reasoning, images=images,
                                     max_tokens=_max_tokens(parsed.num_predict, len(ids), served.n_ctx))
        tools, grammar = active_tools(served, parsed.tools if chat else None)
        if tools is not None:
            params = dataclasses.replace(params, grammar=grammar)
        # logprobs: the lane sends ScoredChunks, framed here (gateway.ollama.logprobs)
        scores = OllamaScores(frames, served.text) if params.logprobs is not None else None
        if tools is not None and scores is not None:
            raise OllamaError(400, "logprobs cannot be combined with tools")
        context_of = None if chat else (lambda text: ids + served.text.encode_prompt(text, add_special=False, parse_special=False))
        out = OllamaOutput(state.config.retry_after_s, frames, context_of or (lambda text: None),
                           tool_format=None if tools is None else tools.fmt, scores=scores)
        framings = []
        if parsed.stream and scores is None:
            # With tools the text comes to Python marked (gateway.ollama.tools finds the calls).
            framings.append(Framing(0, CONTENT, *(frames.content_framing() if tools is None else TOOL_TEXT_FRAMING)))
            if reasoning is not None:  # every split channel needs a framing (else it falls back to content's)
                framings.append(Framing(0, REASONING, *(frames.thinking_framing() if tools is None
                                                        else TOOL_REASONING_FRAMING)))
        return Job([Submission(ids, params, 1, framings, 0, keep_text=parsed.stream and not chat)], out)

    def error_response(self, request_id, error):
        return error_response(request_id, error)


chat = route_handler("chat", _Generate(chat=True))
generate = route_handler("generate", _Generate(chat=False))
