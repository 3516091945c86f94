"""Chat templates: GGUF Jinja templates rendered in jinja2's immutable sandbox.

Templates come from model files (untrusted), so they run sandboxed (gateway/text/template_sandbox.py:
jinja2's immutable sandbox plus bounds on loops, repetition and recursion) with HF's conventions:
trim_blocks/lstrip_blocks, `raise_exception`, `strftime_now`, a `tojson` that keeps non-ASCII, and
llama-server's `date_string` (today).
A template's own `raise_exception("...")` (e.g. roles must alternate) becomes a 400.
Gemma 3's GGUF has no template, so we ship one; without a template llama.cpp
falls back to ChatML, which is wrong for Gemma — a model with neither gets no chat route.
A final assistant turn is continued, not closed (gateway/text/prefill.py).
"""
from __future__ import annotations

import datetime

import jinja2

from gateway.http.errors import invalid
from gateway.text.prefill import split_prefill
from gateway.text.template_bounds import end_render, start_render
from gateway.text.template_filters import tojson
from gateway.text.template_sandbox import BoundedSandbox

# BOS comes from the tokenizer (add_bos is true for Gemma 3), so the template does not emit it.
GEMMA3_TEMPLATE = (
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + message['content'] | trim"
    " + '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)

BUILTIN_TEMPLATES = {"gemma3": GEMMA3_TEMPLATE}


class TemplateRaised(Exception):
    pass


def _raise_exception(message: str) -> None:
    raise TemplateRaised(message)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


class _Undefined(jinja2.Undefined):
    """Joined to a string, an undefined value is empty, as in llama-server's template engine
    (gpt-oss's template writes `"// " + tool.description` for a tool that may have none)."""

    def __add__(self, other):
        return other if isinstance(other, str) else super().__add__(other)

    def __radd__(self, other):
        return other if isinstance(other, str) else super().__radd__(other)


class ChatTemplate:
    """A compiled template plus the special-token strings it may reference."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True, undefined=_Undefined)
        env.filters["tojson"] = env.bounded_filter("tojson", tojson)
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(source)  # TemplateSyntaxError here = a broken model file
        except RecursionError:  # jinja's recursive-descent parser on `[[[[…` (found by fuzzing)
            raise jinja2.TemplateSyntaxError("the template nests too deeply to parse", 1) from None
        self.source = source
        self._bos = bos_token
        self._eos = eos_token

    def render(self, messages: list[dict], template_kwargs: dict | None = None) -> str:
        # A final assistant turn is prefill: rendered as the opened turn plus its text, so the model continues it.
        messages, prefill = split_prefill(messages)
        return self._render(messages, template_kwargs) + (prefill or "")

    def _render(self, messages: list[dict], template_kwargs: dict | None) -> str:
        # Llama 3.x templates print date_string (their own default is a fixed day in 2024):
        # today's, as llama-server passes it; a request's chat_template_kwargs may set another.
        context = {"date_string": _strftime_now("%d %b %Y"), **(template_kwargs or {})}
        context.update(messages=messages, add_generation_prompt=True, bos_token=self._bos, eos_token=self._eos)
        budget = start_render()
        try:
            return self._template.render(**context)
        except TemplateRaised as exc:
            raise invalid(f"the chat template rejected the messages: {str(exc)[:200]}", param="messages") from None
        except (jinja2.TemplateError, TypeError, ValueError, LookupError, ArithmeticError, NameError,
                RuntimeError) as exc:
            # Malformed input reaching template code (e.g. a missing key) is the caller's 400; so is
            # a template beyond the sandbox's bounds (SecurityError) or recursing without end
            # (RecursionError), dividing by zero or overflowing (`range(10**30)`, `1e300 ** 2`),
            # an unknown codec, or a float literal jinja compiles to the undefined name `inf`.
            raise invalid(f"the messages cannot be rendered by this model's chat template ({type(exc).__name__})",
                          param="messages") from None
        finally:
            end_render(budget)


def template_source(embedded: str | None, architecture: str | None) -> str | None:
    """The model's own template, else ours for known architectures, else None (no chat)."""
    if embedded:
        return embedded
    return BUILTIN_TEMPLATES.get(architecture or "")
