"""A chat request's prompt for a served text model, whichever protocol asked (OpenAI chat, Ollama
chat and generate, the Responses API, Anthropic Messages): the tools put into the model's own call
format, the chat template rendered with the reasoning switch (and the markers the lane splits
reasoning at), the images of the messages placed where the template put them (gateway.vision), and
the token budget checked against the context. A final assistant turn is continued (gateway.text.prefill)."""
from __future__ import annotations

import dataclasses

from gateway.features.reasoning import rendered_for_thinking
from gateway.features.tools import HARMONY, HERMES, Tools, chat_for_template, tool_grammar
from gateway.http.errors import APIError, invalid
from gateway.text.prefill import ends_inside, prefill_of
from gateway.vision.request import check_images_served, image_prompt


def active_tools(served, tools: Tools | None) -> tuple[Tools | None, str | None]:
    """(the request's tools in the served model's call format, the grammar the answer follows),
    or (None, None) when the request has no tools in play (gateway.features.tools)."""
    if tools is None or not tools.active:
        return None, None
    tools = dataclasses.replace(tools, fmt=served.text.tool_format or HERMES)
    return tools, tool_grammar(tools, served.text.control_ids)


def chat_prompt(served, messages: list[dict], template_kwargs: dict, tools: Tools | None, think: bool | None,
                think_param: str, *, images=(), param: str = "messages"):
    """(token ids, reasoning markers or None, the lane's PromptImages) of a conversation whose messages carry one
    IMAGE_MARKER per image of `images` (gateway.vision.parts.RequestImage, in order). With images this decodes and
    encodes them: call it off the event loop (the adapters mark such requests Parsed.plan_off_loop)."""
    messages, kwargs = chat_for_template(messages, template_kwargs, tools, served.text.tool_format)
    rendered, markers = rendered_for_thinking(served.text, messages, kwargs, think, param=think_param,
                                              model=served.name)
    prefill = prefill_of(messages)
    if prefill and markers is not None and not markers.harmony:
        # The lane's split starts where the prompt leaves off, which the prefill may have moved.
        head = rendered[:-len(prefill)]
        inside = ends_inside(head.rstrip().endswith(markers.open), prefill, markers.open, markers.close)
        markers = dataclasses.replace(markers, starts_inside=inside)
    if markers is not None and tools is not None and tools.active and served.text.tool_format is HARMONY:
        markers = dataclasses.replace(markers, calls=True)  # the lane writes harmony calls for the parser
    if images:
        check_images_served(served, images, param)
        ids, prompt_images = image_prompt(served.text, served.vision, rendered, list(images), param)
    else:
        ids, prompt_images = served.text.encode_rendered(rendered), ()
    if not ids:
        raise invalid("the prompt is empty after tokenization", param=param)
    return ids, markers, prompt_images


def max_tokens_for(requested: int | None, prompt_len: int, n_ctx: int, prompt_param: str, *,
                   requested_param: str = "max_tokens", over_context_ok: bool = False) -> int:
    """The lane's token budget: the request's, capped by the room the prompt leaves (a capped
    answer ends with finish reason "length"); None fills the context. Asking for more than the
    whole context is a 400 unless `over_context_ok` (Anthropic's required max_tokens is a ceiling)."""
    if prompt_len >= n_ctx:
        raise APIError(400, f"the prompt has {prompt_len} tokens; this model's context is {n_ctx} tokens",
                       param=prompt_param, code="context_length_exceeded")
    if requested is not None and requested > n_ctx and not over_context_ok:
        raise invalid(f"'{requested_param}' ({requested}) exceeds the context length ({n_ctx})", param=requested_param)
    room = n_ctx - prompt_len
    return room if requested is None else min(requested, room)
