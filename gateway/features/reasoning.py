"""Thinking / reasoning: which models think, what a request asks for, how the lane splits it.

A model thinks when its chat template carries reasoning markers (Qwen3, DeepSeek-R1 style:
`<think>` … `</think>`) or writes gpt-oss's harmony channels (`<|channel|>` … `<|message|>`: the
analysis channel is reasoning, the final channel content). Requests ask with `enable_thinking` /
`chat_template_kwargs.enable_thinking` (vLLM, llama-server), `reasoning_effort` (OpenAI) or Ollama's
`think`; the answer is a bool or None (model default). Asking for thinking on a model without markers
is a 400, as in Ollama. When thinking is not switched off, the lane splits the model's output at the
markers (csrc/engine/reasoning_splitter.h) into the reasoning channel (lanes.wire.CHANNELS["reasoning"]);
switched off, everything stays content (harmony: still without its control text, as for the other
models; llama-server's enable_thinking does not change gpt-oss's split, and its reasoning_format "none"
keeps the raw markers). Reasoning sent back in history is never rendered again (the message parsers
drop `reasoning_content` / `reasoning` / `thinking`), but for gpt-oss's tool-call turns
(gateway.features.tools.tool_call_thinking).

Interface for protocol routes (OpenAI here, Ollama in gateway/ollama):
  * `thinking_markers(template_source)` / `ModelText.thinking_markers` → (open, close) or None;
    `ModelText.supports_thinking`.
  * `think_from_ollama(value)`      Ollama `think`: bool or "low"/"medium"/"high" → bool | None.
  * `effort_kwargs(level)`          a level (OpenAI `reasoning_effort`, Responses `reasoning.effort`,
        Ollama `think`) → the chat template kwargs that carry it: {"reasoning_effort": level} for
        low/medium/high (gpt-oss's template prints "Reasoning: low"; without it, medium), else {}.
        Anthropic's `thinking` has no level. Request kwargs (`chat_template_kwargs`) take precedence.
  * `render_for_thinking(text, messages, template_kwargs, think, param=..., model=...)`
        → (token ids, ReasoningMarkers | None): checks support (400), sets `enable_thinking` for
        the template, renders, decides whether generation starts inside the block.
    Pass the markers as GenerationParams(reasoning=...) (gateway.serve.lanes.generation_params(...,
    reasoning=markers)). Streams: register a framing for channel gateway.serve.lanes.REASONING of EVERY
    choice whenever markers is not None (a channel without framing falls back to content's, which
    would print the reasoning as content); (choice, REASONING, prefix, suffix) inserts the escaped
    text once, (choice, REASONING, prefix, middle, suffix) twice. Collect mode: ChoiceDone.text is
    the escaped content, ChoiceDone.reasoning the escaped reasoning (b"" when none).
"""
from __future__ import annotations

from gateway.http.errors import invalid
from lanes.api import ReasoningMarkers

# gpt-oss's harmony format: the template writes channels, the lane splits them (ReasoningMarkers.harmony);
# the pair only names the format (lane_markers), it is no open/close pair.
HARMONY = ("<|channel|>", "<|message|>")
# The marker pairs we recognise in templates, most specific first.
KNOWN_MARKERS = (HARMONY, ("<think>", "</think>"))
EFFORTS = ("none", "minimal", "low", "medium", "high")
# The levels a chat template is told (as vLLM and Ollama pass them to gpt-oss); Ollama's `think` takes the same.
TEMPLATE_EFFORTS = ("low", "medium", "high")
OLLAMA_LEVELS = TEMPLATE_EFFORTS


def effort_kwargs(level) -> dict:
    return {"reasoning_effort": level} if level in TEMPLATE_EFFORTS else {}


def thinking_markers(template_source: str | None) -> tuple[str, str] | None:
    if not template_source:
        return None
    for open_marker, close_marker in KNOWN_MARKERS:
        if open_marker in template_source and close_marker in template_source:
            return open_marker, close_marker
    return None


def think_from_openai(enable_thinking, reasoning_effort) -> bool | None:
    """`enable_thinking` (already merged from chat_template_kwargs) and `reasoning_effort`:
    "none" switches thinking off, any other level on (the level does not bound the length)."""
    if enable_thinking is not None and type(enable_thinking) is not bool:
        raise invalid("'enable_thinking' must be true or false", param="enable_thinking", code="invalid_type")
    effort = None
    if reasoning_effort is not None:
        if reasoning_effort not in EFFORTS:
            raise invalid(f"'reasoning_effort' must be one of {', '.join(EFFORTS)}", param="reasoning_effort")
        effort = reasoning_effort != "none"
    if enable_thinking is not None and effort is not None and enable_thinking != effort:
        raise invalid("'reasoning_effort' conflicts with 'enable_thinking'", param="reasoning_effort")
    return enable_thinking if enable_thinking is not None else effort


def think_from_ollama(value) -> bool | None:
    """Ollama's `think`: true/false, or "low"/"medium"/"high" (= true); None when absent."""
    if value is None or type(value) is bool:
        return value
    if type(value) is str and value in OLLAMA_LEVELS:
        return True
    raise invalid("'think' must be true, false, \"low\", \"medium\" or \"high\"", param="think")


def check_thinking(text, think: bool | None, *, param: str, model: str) -> tuple[str, str] | None:
    """The model's markers when its output should be split, None when everything is content;
    400 when thinking is asked of a model that has none."""
    markers = text.thinking_markers
    if markers is None:
        if think:
            raise invalid(f"model {model!r} does not support thinking", param=param, code="thinking_not_supported")
        return None
    # Harmony output is split whatever the switch: its control text never reaches the client.
    return None if think is False and markers != HARMONY else markers


def lane_markers(markers: tuple[str, str], think: bool | None, starts_inside: bool = False) -> ReasoningMarkers:
    """check_thinking's markers as the lane takes them; harmony with thinking off keeps the
    analysis channel as content (everything content, as for other models, without the control text)."""
    if markers == HARMONY:
        return ReasoningMarkers("", "", harmony=True, as_content=think is False)
    return ReasoningMarkers(markers[0], markers[1], starts_inside)


def render_for_thinking(text, messages: list[dict], template_kwargs: dict | None, think: bool | None, *,
                        param: str, model: str) -> tuple[list[int], ReasoningMarkers | None]:
    rendered, markers = rendered_for_thinking(text, messages, template_kwargs, think, param=param, model=model)
    return text.encode_rendered(rendered), markers


def rendered_for_thinking(text, messages: list[dict], template_kwargs: dict | None, think: bool | None, *,
                          param: str, model: str) -> tuple[str, ReasoningMarkers | None]:
    """render_for_thinking's rendered text before tokenization (a prompt with images is tokenized around them)."""
    markers = check_thinking(text, think, param=param, model=model)
    kwargs = dict(template_kwargs or {})
    if think is not None and text.thinking_markers is not None:
        kwargs["enable_thinking"] = think
    rendered = text.render_chat(messages, kwargs)
    if markers is None:
        return rendered, None
    # Templates that open the block in the generation prompt (DeepSeek-R1) start inside it.
    starts_inside = rendered.rstrip().endswith(markers[0])
    return rendered, lane_markers(markers, think, starts_inside)
