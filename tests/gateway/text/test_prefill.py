"""Assistant prefill (gateway/text/prefill.py) without a model: a final assistant turn renders as the opened
turn plus its text, with no end-of-turn after it, whatever the template; tool-call turns and other final roles
render as before; a thinking model's split starts where the prompt leaves off (gateway.features.chat_prompt)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from gateway.features.chat_prompt import chat_prompt
from gateway.text.chat_template import GEMMA3_TEMPLATE, ChatTemplate
from gateway.text.prefill import ends_inside, split_prefill

from .fake_text import FakeText
from .test_chat_template import SMOLLM2

TEMPLATES = Path(__file__).resolve().parents[2] / "data" / "templates"
USER = {"role": "user", "content": "Count from 1 to 10 separated by commas."}
PREFILL = "1, 2, 3, 4,"
ASSISTANT = {"role": "assistant", "content": PREFILL}


def test_smollm2_continues_the_final_assistant_turn():
    rendered = ChatTemplate(SMOLLM2).render([USER, ASSISTANT])
    assert rendered.endswith("<|im_end|>\n<|im_start|>assistant\n" + PREFILL)  # no <|im_end|> after it
    assert rendered == ChatTemplate(SMOLLM2).render([USER]) + PREFILL


def test_gemma3_continues_the_model_turn_untrimmed():
    rendered = ChatTemplate(GEMMA3_TEMPLATE).render([USER, {"role": "assistant", "content": "1, 2, "}])
    assert rendered == f"<start_of_turn>user\n{USER['content']}<end_of_turn>\n<start_of_turn>model\n1, 2, "


def test_earlier_assistant_turns_are_still_closed():
    rendered = ChatTemplate(SMOLLM2).render([USER, {"role": "assistant", "content": "A1"},
                                            {"role": "user", "content": "U2"}, ASSISTANT])
    assert "<|im_start|>assistant\nA1<|im_end|>\n" in rendered
    assert rendered.endswith("U2<|im_end|>\n<|im_start|>assistant\n" + PREFILL)


def test_empty_final_assistant_turn_is_the_generation_prompt():
    template = ChatTemplate(SMOLLM2)
    assert template.render([USER, {"role": "assistant", "content": ""}]) == template.render([USER])


@pytest.mark.parametrize("last", [
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
    {"role": "assistant", "content": "x", "tool_calls": []},  # a generic-mode call turn (generic_messages marks it)
    {"role": "assistant", "content": None},
    {"role": "user", "content": "again"},
])
def test_other_final_turns_are_no_prefill(last):
    assert split_prefill([USER, last]) == ([USER, last], None)


def test_prefill_skips_the_template_so_its_checks_see_the_rest():
    # Gemma's template requires alternating roles; the prefill turn is not among the rendered ones.
    assert ChatTemplate(GEMMA3_TEMPLATE).render([ASSISTANT]) == "<start_of_turn>model\n" + PREFILL


@pytest.mark.parametrize("path", sorted(TEMPLATES.glob("*.jinja")), ids=lambda p: p.stem)
def test_every_model_template_ends_with_the_prefill(path):
    template = ChatTemplate(path.read_text(encoding="utf-8"), bos_token="<s>", eos_token="</s>")
    kwargs = {"enable_thinking": False}  # Qwen 3 / SmolLM3: the opened turn carries the empty think block
    assert template.render([USER, ASSISTANT], kwargs) == template.render([USER], kwargs) + PREFILL


@pytest.mark.parametrize("generation_prompt_inside, prefill, inside", [
    (False, "plain text", False),
    (True, "still thinking", True),          # DeepSeek-R1's generation prompt opened the block
    (False, "<think>Hmm,", True),            # the prefill opened it
    (True, "done</think>\n\nThe", False),   # ... or closed it
    (False, "<think>a</think>b<think>c", True),
])
def test_ends_inside(generation_prompt_inside, prefill, inside):
    assert ends_inside(generation_prompt_inside, prefill, "<think>", "</think>") is inside


# DeepSeek-R1-like: the generation prompt opens the reasoning block (history drops reasoning up to </think>).
R1 = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content.split('</think>')[-1] }}<|end|>{% endfor %}"
      "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}")
# Qwen3-like: the model opens the block itself (the template writes an empty one only with thinking off).
QWEN = R1.replace("<think>\n{% endif %}",
                  "{% if enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}")


@pytest.mark.parametrize("source, prefill, inside", [
    (R1, "", True), (R1, "The user wants", True), (R1, "ok</think>\n\nThe answer", False),
    (QWEN, "", False), (QWEN, "The answer", False), (QWEN, "<think>Hmm,", True),
])
def test_chat_prompt_starts_the_split_where_the_prefill_leaves_off(source, prefill, inside):
    text = FakeText(source)
    served = SimpleNamespace(text=text, name="m")
    ids, markers, _ = chat_prompt(served, [USER, {"role": "assistant", "content": prefill}], {}, None, None, "think")
    assert text.rendered.endswith("<think>\n" + prefill if source is R1 else prefill)
    assert markers.starts_inside is inside and ids[-1] == ord(text.rendered[-1])


def test_chat_prompt_does_not_continue_a_generic_mode_call_turn():
    # SmolLM2's template has no tool support: the generic mode writes the call as text; it stays a closed turn.
    text = FakeText(SMOLLM2)
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}
    chat_prompt(SimpleNamespace(text=text, name="m"), [USER, call], {}, None, None, "think")
    assert text.rendered.endswith("<|im_end|>\n<|im_start|>assistant\n")
