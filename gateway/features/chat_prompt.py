"""A chat request's prompt and budget, for every protocol that plans chat generations (OpenAI chat,
Anthropic Messages): the served model's tool format and grammar, the rendered prompt's token ids
with the reasoning markers the lane splits at, and the token budget the context leaves."""
from __future__ import annotations

import dataclasses

from gateway.features.reasoning import render_for_thinking
from gateway.features.tools import HERMES, Tools, chat_for_template, tool_grammar
from gateway.http.errors import APIError, invalid


def served_tools(tools: Tools | None, text) -> Tools | None:
    """The request's tools in the served model's call format (gateway.features.tools); None when
    none are active (absent, or tool_choice none)."""
    if tools is None or not tools.active:
        return None
    return dataclasses.replace(tools, fmt=text.tool_format or HERMES)


def with_tool_grammar(sampling, tools: Tools | None):
    """The sampling fields with the grammar of the answer under active `tools`."""
    return sampling if tools is None else dataclasses.replace(sampling, grammar=tool_grammar(tools))


def chat_prompt_ids(served, parsed):
    """(token ids, reasoning markers for the lane or None) of a chat request (messages,
    template_kwargs, tools, think, think_param: gateway.openai.requests.ChatRequest's fields)."""
    messages, kwargs = chat_for_template(list(parsed.messages), parsed.template_kwargs, parsed.tools,
                                         served.text.supports_tools)
    ids, markers = render_for_thinking(served.text, messages, kwargs, parsed.think,
                                       param=parsed.think_param, model=served.name)
    if not ids:
        raise invalid("the prompt is empty after tokenization", param="messages")
    return ids, markers


def max_tokens(requested: int | None, prompt_len: int, n_ctx: int, prompt_param: str, *,
               over_context_ok: bool = False) -> int:
    """The lane's token budget: what the request asked for (None: the rest of the context), capped
    by the context (the answer then ends "length"). A request for more than the whole context is a
    400 unless `over_context_ok` (Anthropic's required max_tokens is a ceiling, not a demand)."""
    if prompt_len >= n_ctx:
        raise APIError(400, f"the prompt has {prompt_len} tokens; this model's context is {n_ctx} tokens",
                       param=prompt_param, code="context_length_exceeded")
    if requested is not None and requested > n_ctx and not over_context_ok:
        raise invalid(f"'max_tokens' ({requested}) exceeds the context length ({n_ctx})", param="max_tokens")
    room = n_ctx - prompt_len
    return room if requested is None else min(requested, room)
