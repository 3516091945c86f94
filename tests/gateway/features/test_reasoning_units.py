"""Thinking without a server: request switches, template markers, rendering (history reasoning never
fed back, generation starting inside the block), frames carrying reasoning twice."""
import json
from pathlib import Path

import orjson
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from gateway.http.errors import APIError
from gateway.openai.frames import ChoiceResult, StreamFrames, non_stream_body
from gateway.openai.requests import parse_chat
from gateway.features.reasoning import (HARMONY, check_thinking, effort_kwargs, render_for_thinking,
                                       think_from_ollama, think_from_openai, thinking_markers)
from gateway.ollama.requests import parse_chat as ollama_chat, parse_generate
from gateway.responses.requests import parse_responses
from lanes.api import ReasoningMarkers

from ..text.fake_text import FakeText

QWEN3 = (Path(__file__).resolve().parents[2] / "data" / "templates" / "qwen3-0.6b.jinja").read_text()
# DeepSeek-R1 style: the generation prompt opens the block itself.
OPENING = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
           "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}{# </think> #}")
SMOL = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def test_markers_come_from_the_template():
    assert thinking_markers(QWEN3) == ("<think>", "</think>")
    assert thinking_markers(OPENING) == ("<think>", "</think>")
    assert thinking_markers(SMOL) is None and thinking_markers(None) is None


def test_openai_switches():
    assert think_from_openai(None, None) is None
    assert think_from_openai(True, None) is True and think_from_openai(False, "none") is False
    assert think_from_openai(None, "none") is False
    assert all(think_from_openai(None, e) is True for e in ("minimal", "low", "medium", "high"))
    for bad in [(None, "max"), (True, "none"), ("yes", None)]:
        with pytest.raises(APIError):
            think_from_openai(*bad)


def test_ollama_think_values():
    assert think_from_ollama(None) is None and think_from_ollama(False) is False
    assert all(think_from_ollama(v) is True for v in (True, "low", "medium", "high"))
    with pytest.raises(APIError) as info:
        think_from_ollama("max")
    assert info.value.param == "think"


def test_parse_chat_carries_the_switch_and_drops_history_reasoning():
    base = {"model": "m", "messages": [{"role": "user", "content": "q"},
                                       {"role": "assistant", "content": "a", "reasoning_content": "r1",
                                        "reasoning": "r2", "thinking": "r3"},
                                       {"role": "user", "content": "q2"}]}
    parsed = parse_chat(base, lenient=False)
    assert parsed.think is None and all(set(m) == {"role", "content"} for m in parsed.messages)
    assert parse_chat({**base, "chat_template_kwargs": {"enable_thinking": False}}, lenient=False).think is False
    effort = parse_chat({**base, "reasoning_effort": "low"}, lenient=False)
    assert effort.think is True and effort.think_param == "reasoning_effort"


def test_no_thinking_model_refuses_only_an_explicit_request():
    text = FakeText(SMOL)
    assert check_thinking(text, None, param="p", model="m") is None
    assert check_thinking(text, False, param="p", model="m") is None
    with pytest.raises(APIError) as info:
        check_thinking(text, True, param="think", model="smollm2")
    assert info.value.status == 400 and info.value.code == "thinking_not_supported" and info.value.param == "think"
    assert "'smollm2' does not support thinking" in info.value.message


def test_qwen3_render_switch_and_markers():
    text = FakeText(QWEN3)
    user = [{"role": "user", "content": "hi"}]
    _, markers = render_for_thinking(text, user, {}, None, param="p", model="m")
    assert text.rendered.endswith("<|im_start|>assistant\n") and markers.open == "<think>"
    assert not markers.starts_inside
    _, markers = render_for_thinking(text, user, {}, False, param="p", model="m")
    assert text.rendered.endswith("<think>\n\n</think>\n\n") and markers is None


def test_history_reasoning_is_not_rendered_even_for_the_last_assistant_turn():
    text = FakeText(QWEN3)
    parsed = parse_chat({"model": "m", "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "answer", "reasoning_content": "SECRET"}]}, lenient=False)
    render_for_thinking(text, list(parsed.messages), {}, True, param="p", model="m")
    assert "SECRET" not in text.rendered and "answer" in text.rendered


def test_generation_prompt_that_opens_the_block_starts_inside():
    text = FakeText(OPENING)
    _, markers = render_for_thinking(text, [{"role": "user", "content": "x"}], {}, None, param="p", model="m")
    assert markers.starts_inside and (markers.open, markers.close) == ("<think>", "</think>")


def test_reasoning_frame_fills_both_fields_once_per_delta():
    frames = StreamFrames("chatcmpl-x", 1700000000, "m", True, False)
    prefix, middle, suffix = frames.reasoning_framing(1)
    esc = orjson.dumps('a "b"\n')[1:-1]
    event = prefix + esc + middle + esc + suffix
    chunk = json.loads(event[len(b"data: "):-2])
    assert chunk["choices"][0]["delta"] == {"reasoning_content": 'a "b"\n', "reasoning": 'a "b"\n'}
    ChatCompletionChunk.model_validate(chunk)


def test_non_stream_body_has_reasoning_only_when_there_is_some():
    esc = orjson.dumps("why\n")[1:-1]
    body = non_stream_body(completion_id="c", created=1, model="m", chat=True, prompt_tokens=1, completion_tokens=2,
                           choices=[ChoiceResult([b"ans", b"wer"], "stop", [esc[:2], esc[2:]]),
                                    ChoiceResult([b"plain"], "stop", [b""])])
    parsed = json.loads(body)
    ChatCompletion.model_validate(parsed)
    first, second = (c["message"] for c in parsed["choices"])
    assert first == {"role": "assistant", "content": "answer", "reasoning_content": "why\n", "reasoning": "why\n"}
    assert second == {"role": "assistant", "content": "plain"}


GPT_OSS = (Path(__file__).resolve().parents[2] / "data" / "arch" / "gpt-oss.jinja").read_text()


def test_harmony_template_splits_channels_and_thinking_off_keeps_them_content():
    assert thinking_markers(GPT_OSS) == HARMONY
    text = FakeText(GPT_OSS)
    user = [{"role": "user", "content": "hi"}]
    _, markers = render_for_thinking(text, user, {}, None, param="p", model="m")
    assert text.rendered.endswith("<|start|>assistant")
    assert markers == ReasoningMarkers("", "", harmony=True, as_content=False)
    _, markers = render_for_thinking(text, user, {}, False, param="p", model="m")
    assert markers == ReasoningMarkers("", "", harmony=True, as_content=True)
    low = parse_chat({"model": "m", "messages": user, "reasoning_effort": "low"}, lenient=False)
    render_for_thinking(text, low.messages, low.template_kwargs, low.think, param="p", model="m")
    assert "Reasoning: low" in text.rendered  # the template's level, not its default medium
    render_for_thinking(text, user, {}, None, param="p", model="m")
    assert "Reasoning: medium" in text.rendered
    with pytest.raises(ValueError):
        ReasoningMarkers("<|channel|>", "", harmony=True)
    with pytest.raises(ValueError):
        ReasoningMarkers("<think>", "</think>", as_content=True)


def test_reasoning_levels_reach_the_template_from_every_api():
    assert effort_kwargs("low") == {"reasoning_effort": "low"}
    assert effort_kwargs("none") == effort_kwargs(True) == effort_kwargs(None) == {}
    user = [{"role": "user", "content": "hi"}]
    text = FakeText(GPT_OSS)

    def rendered_level(template_kwargs, think):
        render_for_thinking(text, user, template_kwargs, think, param="p", model="m")
        return text.rendered.split("Reasoning: ")[1].split("\n")[0]

    chat = parse_chat({"model": "m", "messages": user, "reasoning_effort": "high"}, lenient=False)
    assert rendered_level(chat.template_kwargs, chat.think) == "high"
    own = parse_chat({"model": "m", "messages": user, "reasoning_effort": "high",
                      "chat_template_kwargs": {"reasoning_effort": "low"}}, lenient=False)
    assert own.template_kwargs["reasoning_effort"] == "low"  # the request's own kwargs win
    responses = parse_responses({"model": "m", "input": "hi", "reasoning": {"effort": "low"}}, lenient=False)
    assert responses.think is True and rendered_level(responses.template_kwargs, responses.think) == "low"
    for parse in (lambda b: ollama_chat({**b, "messages": user}), lambda b: parse_generate({**b, "prompt": "hi"})):
        ollama = parse({"model": "m", "think": "low"})
        assert ollama.think is True and rendered_level(ollama.template_kwargs, ollama.think) == "low"
        assert parse({"model": "m", "think": True}).template_kwargs == {}
    assert rendered_level({}, None) == "medium"
