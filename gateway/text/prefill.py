"""Assistant prefill: a conversation whose last message is an assistant turn is continued, not answered anew.

llama-server (by default), Ollama's /api/chat and Anthropic's Messages API ("prefill Claude's response") all
continue a final assistant turn. As llama-server does it, template-agnostically: the conversation without that
turn is rendered with the generation prompt (the template's opened assistant turn, thinking block and all), and
the turn's text is appended verbatim, with no end-of-turn, so the model's next token continues it. The reply is
only the new text. A final assistant turn with tool calls is no prefill (the template renders it as it does);
an empty one ("") is a prefill of nothing: the plain generation prompt.

Thinking models: the template's opened turn is kept as it is; the lane then splits the continuation from where
the prompt leaves off (`ends_inside`): inside the reasoning block when the generation prompt opened it or the
prefill opened one it did not close, else in the content. Harmony (gpt-oss) needs nothing: text before the first
channel header is content (csrc/engine/reasoning_splitter.h).
"""
from __future__ import annotations


def split_prefill(messages: list[dict]) -> tuple[list[dict], str | None]:
    """(the messages to render with the generation prompt, the text to append after it), or (messages, None)
    when the conversation does not end in an assistant turn to continue."""
    if not messages:
        return messages, None
    last = messages[-1]
    # "tool_calls" present at all (even empty): a tool-call turn (gateway.features.tools.generic_messages marks the
    # generic mode's rewritten ones so), never continued as text.
    if last.get("role") != "assistant" or "tool_calls" in last or type(last.get("content")) is not str:
        return messages, None
    return messages[:-1], last["content"]


def prefill_of(messages: list[dict]) -> str | None:
    return split_prefill(messages)[1]


def ends_inside(generation_prompt_inside: bool, prefill: str, open_marker: str, close_marker: str) -> bool:
    """Whether generation starts inside the reasoning block: the prefill's last marker decides, else the
    generation prompt (`generation_prompt_inside`: it ended with the open marker, as DeepSeek-R1's does)."""
    opened, closed = prefill.rfind(open_marker), prefill.rfind(close_marker)
    if opened < 0 and closed < 0:
        return generation_prompt_inside
    return opened > closed
