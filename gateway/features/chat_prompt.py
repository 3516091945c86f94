"""A chat request's prompt for a served text model, whichever protocol asked (OpenAI chat, the
Responses API, Anthropic Messages): the tools put into the model's own call format, the chat
template rendered with the reasoning switch (and the markers the lane splits reasoning at), and
the token budget checked against the context."""
from __future__ import annotations

import dataclasses

from gateway.features.reasoning import render_for_thinking
from gateway.features.tools import HERMES, Tools, chat_for_template, tool_grammar
from gateway.http.errors import APIError, invalid


def active_tools(served, tools: Tools | None) -> tuple[Tools | None, str | None]:
    """(the request's tools in the served model's call format, the grammar the answer follows),
    or (None, None) when the request has no tools in play (gateway.features.tools)."""
    if tools is None or not tools.active:
        return None, None
    tools = dataclasses.replace(tools, fmt=served.text.tool_format or HERMES)
    return tools, tool_grammar(tools)


def chat_prompt_ids(served, messages: list[dict], template_kwargs: dict, tools: Tools | None, think: bool | None,
                    think_param: str, *, param: str = "messages"):
    """(token ids, the lane's reasoning markers or None) of a conversation; an empty prompt is a 400 on `param`."""
    messages, kwargs = chat_for_template(messages, template_kwargs, tools, served.text.supports_tools)
    ids, markers = render_for_thinking(served.text, messages, kwargs, think, param=think_param, model=served.name)
    if not ids:
        raise invalid("the prompt is empty after tokenization", param=param)
    return ids, markers


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
