"""POST /v1/completions and POST /v1/chat/completions: the OpenAI adapter of the request pipeline.

parse: body → validated fields (gateway.openai.requests) → the model; plan: tokenize (chat
template, reasoning switches, tool prompts, images: in a worker thread) → context check → one lane submission per prompt,
with the frames each choice's deltas are wrapped in (gateway.openai.frames).
"""
from __future__ import annotations

import dataclasses

from gateway.features.chat_prompt import active_tools, chat_prompt, max_tokens_for
from gateway.http.body import parse_json_object
from gateway.http.errors import invalid
from gateway.openai.frames import StreamFrames, new_completion_id, now_s
from gateway.openai.logprobs import request_scores
from gateway.openai.output import OpenAIOutput
from gateway.openai.requests import COMMON_FIELDS, parse_chat, parse_completion
from gateway.openai.tool_stream import TOOL_REASONING_FRAMING, TOOL_TEXT_FRAMING
from gateway.serve.generation import Submission
from gateway.serve.handler import Adapter, Job, Parsed, route_handler
from gateway.serve.lanes import CONTENT, REASONING, Framing, RepeatedFraming, generation_params
from gateway.vision.request import check_images_served


def _prompt_ids(served, parsed, chat: bool, tools):
    """(token ids per prompt, reasoning markers for the lane or None, the prompt's images for the lane)."""
    if chat:
        ids, markers, images = chat_prompt(served, list(parsed.messages), parsed.template_kwargs, tools,
                                           parsed.think, parsed.think_param, images=parsed.images)
        return [ids], markers, images
    all_ids = []
    for prompt in parsed.prompts:
        if isinstance(prompt, str):
            all_ids.append(served.text.encode_prompt(prompt))
        else:
            served.text.check_token_ids(prompt, "prompt")
            all_ids.append(list(prompt))
        if not all_ids[-1]:
            raise invalid("the prompt is empty after tokenization", param="prompt")
    return all_ids, None, ()


def _check_logit_bias(served, parsed) -> None:
    for token, _ in parsed.sampling.logit_bias:
        if token >= served.n_vocab:
            raise invalid(f"logit_bias token id {token} is outside the vocabulary", param="logit_bias")


class _Generate(Adapter):
    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.route = "chat" if chat else "completions"

    async def parse(self, request, state) -> Parsed:
        config = state.config
        body = parse_json_object(request.body, request.headers.get("content-type"), config.max_json_depth)
        parsed = (parse_chat if self.chat else parse_completion)(body, lenient=config.lenient)
        served = state.text_model(parsed.sampling.model)
        if parsed.sampling.n > config.max_n:
            raise invalid(f"'n' must be between 1 and {config.max_n}", param="n")
        lora = state.lora_for(parsed.sampling.model, COMMON_FIELDS["lora"].read(body))
        images = parsed.images if self.chat else ()
        check_images_served(served, images, "messages")
        return Parsed(served.name, parsed.sampling.stream, parsed, tuple(parsed.ignored_fields or ()), lora,
                      plan_off_loop=bool(images))

    def plan(self, state, p: Parsed) -> Job:
        chat, parsed, served = self.chat, p.fields, state.models[p.model]
        sampling = parsed.sampling
        tools, grammar = active_tools(served, parsed.tools) if chat else (None, None)
        if tools is not None:  # the answer follows the model's tool-call format (gateway.features.tools)
            sampling = dataclasses.replace(sampling, grammar=grammar)
        prompts, markers, images = _prompt_ids(served, parsed, chat, tools)
        _check_logit_bias(served, parsed)
        frames = StreamFrames(new_completion_id(chat), now_s(), served.name, chat, sampling.include_usage)
        echo = not chat and parsed.echo
        # Logprobs and echo: the lane sends ScoredChunks, framed in Python (gateway.openai.logprobs).
        scores = request_scores(frames, served.text, parsed, prompts) if sampling.logprobs is not None or echo else None
        out = OpenAIOutput(state.config.retry_after_s, frames, len(prompts) * sampling.n, sampling.n,
                           tool_format=None if tools is None else tools.fmt, scores=scores)
        submissions = []
        for p_index, ids in enumerate(prompts):
            max_tokens = max_tokens_for(sampling.max_tokens, len(ids), served.n_ctx, "messages" if chat else "prompt")
            params = generation_params(sampling, max_tokens, markers, prompt_logprobs=echo, images=images)
            first = p_index * sampling.n
            framings = []  # non-stream: the relay collects each choice's escaped text
            if sampling.stream and scores is None:
                # Tools: content reaches Python marked (gateway.openai.tool_stream) to find the calls in it.
                framings = [Framing(j, CONTENT, *(frames.content_framing(first + j) if tools is None else TOOL_TEXT_FRAMING))
                            for j in range(sampling.n)]
                if markers is not None:
                    framings += [RepeatedFraming(j, REASONING, *frames.reasoning_framing(first + j)) if tools is None
                                 else Framing(j, REASONING, *TOOL_REASONING_FRAMING) for j in range(sampling.n)]
            submissions.append(Submission(ids, params, sampling.n, framings, first))
        return Job(submissions, out)


completions = route_handler("completions", _Generate(chat=False))
chat_completions = route_handler("chat_completions", _Generate(chat=True))
