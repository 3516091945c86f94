"""POST /v1/messages and POST /v1/messages/count_tokens: the Anthropic adapter of the request pipeline.

parse: body → validated fields (gateway.anthropic.requests, into the neutral chat request) → the
model; plan: the chat prompt as the OpenAI chat route renders it (gateway.features.chat_prompt) →
one lane submission, its text framed natively as `text_delta` events (plain answers) or marked for
Python (thinking, tools: gateway.anthropic.output). count_tokens plans the same
prompt and answers without a lane. Errors are Anthropic's (gateway.anthropic.errors).
"""
from __future__ import annotations

import dataclasses

from gateway.anthropic.errors import error_response
from gateway.anthropic.frames import text_delta_framing
from gateway.anthropic.output import CountOutput, MessagesOutput
from gateway.anthropic.requests import parse_messages_request
from gateway.features.chat_prompt import active_tools, chat_prompt, max_tokens_for
from gateway.http.body import parse_json_object
from gateway.serve.generation import Submission
from gateway.serve.handler import Adapter, Job, Parsed, route_handler
from gateway.serve.output import CONTENT_MARK, REASONING_MARK
from gateway.serve.lanes import CONTENT, REASONING, Framing, generation_params
from gateway.vision.request import check_images_served


class _Messages(Adapter):
    def __init__(self, count_only: bool) -> None:
        self.count_only = count_only
        self.route = "anthropic_count_tokens" if count_only else "anthropic_messages"

    async def parse(self, request, state) -> Parsed:
        config = state.config
        body = parse_json_object(request.body, request.headers.get("content-type"), config.max_json_depth)
        parsed = parse_messages_request(body, lenient=config.lenient, count_only=self.count_only)
        served = state.text_model(parsed.chat.sampling.model)
        check_images_served(served, parsed.chat.images, "messages")
        return Parsed(served.name, parsed.chat.sampling.stream, parsed, parsed.ignored_fields,
                      () if self.count_only else state.lora_for(parsed.chat.sampling.model),
                      plan_off_loop=bool(parsed.chat.images))

    def plan(self, state, p: Parsed) -> Job:
        request, served = p.fields, state.models[p.model]
        chat = request.chat
        tools, grammar = active_tools(served, chat.tools)
        ids, markers, images = chat_prompt(served, list(chat.messages), chat.template_kwargs, tools, chat.think,
                                           chat.think_param, images=chat.images)
        if self.count_only:
            return Job([], CountOutput(len(ids)))
        sampling = chat.sampling if tools is None else dataclasses.replace(chat.sampling, grammar=grammar)
        max_tokens = max_tokens_for(sampling.max_tokens, len(ids), served.n_ctx, "messages", over_context_ok=True)
        params = generation_params(sampling, max_tokens, markers, images=images)
        direct = tools is None and markers is None
        out = MessagesOutput(state.config.retry_after_s, served.name, len(ids), stream=p.stream, direct=direct,
                             tool_format=None if tools is None else tools.fmt, stops=sampling.stop)
        framings = []  # non-stream: the lane collects the text
        if p.stream and direct:
            framings = [Framing(0, CONTENT, *text_delta_framing(0))]
        elif p.stream:
            framings = [Framing(0, CONTENT, *CONTENT_MARK)]
            if markers is not None:  # every split channel needs a framing (else it falls back to content's)
                framings.append(Framing(0, REASONING, *REASONING_MARK))
        return Job([Submission(ids, params, 1, framings, 0)], out)

    def error_response(self, request_id, error):
        return error_response(request_id, error)


messages = route_handler("anthropic_messages", _Messages(count_only=False))
count_tokens = route_handler("anthropic_count_tokens", _Messages(count_only=True))
