"""/v1/completions and /v1/chat/completions against the real server with the real SmolLM2,
driven by the openai client and httpx."""
from __future__ import annotations

import openai
import pytest

pytestmark = pytest.mark.real_model  # the session server runs the real SmolLM2

CHAT = [{"role": "user", "content": "What is the capital of France?"}]
PROMPT = "The three primary colors are"


def stream_chat_text(client, **kwargs):
    chunks = list(client.chat.completions.create(model="smollm2", messages=CHAT, stream=True, **kwargs))
    return chunks, "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_chat_stream_text_equals_non_stream_at_temperature_0(openai_client):
    reply = openai_client.chat.completions.create(model="smollm2", messages=CHAT, temperature=0, max_tokens=40)
    chunks, streamed = stream_chat_text(openai_client, temperature=0, max_tokens=40)
    assert reply.choices[0].message.content and streamed == reply.choices[0].message.content
    assert reply.choices[0].message.role == "assistant"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert chunks[-1].choices[0].finish_reason == reply.choices[0].finish_reason
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    assert reply.usage.completion_tokens > 0 and reply.usage.prompt_tokens > 20  # template + system prompt


def test_completions_stream_text_equals_non_stream_at_temperature_0(openai_client):
    reply = openai_client.completions.create(model="smollm2", prompt=PROMPT, temperature=0, max_tokens=24)
    chunks = list(openai_client.completions.create(model="smollm2", prompt=PROMPT, temperature=0, max_tokens=24,
                                                   stream=True))
    assert "".join(c.choices[0].text for c in chunks) == reply.choices[0].text
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 24
    assert reply.id.startswith("cmpl-") and reply.object == "text_completion"


def test_stop_strings_are_never_streamed(openai_client):
    base = openai_client.completions.create(model="smollm2", prompt=PROMPT, temperature=0, max_tokens=24)
    text = base.choices[0].text
    words = text.split()
    assert len(words) >= 4, text
    stop = " " + words[2]
    expected = text[: text.index(stop)]
    chunks = list(openai_client.completions.create(model="smollm2", prompt=PROMPT, temperature=0, max_tokens=24,
                                                   stop=[stop, "@@never@@"], stream=True))
    deltas = [c.choices[0].text for c in chunks]
    assert "".join(deltas) == expected
    assert all(stop.strip() not in d for d in deltas)
    assert chunks[-1].choices[0].finish_reason == "stop"
    reply = openai_client.completions.create(model="smollm2", prompt=PROMPT, temperature=0, max_tokens=24, stop=stop)
    assert reply.choices[0].text == expected and reply.choices[0].finish_reason == "stop"


def test_seeded_sampling_is_reproducible(openai_client):
    kwargs = dict(model="smollm2", messages=CHAT, temperature=1.0, top_p=0.95, max_tokens=24, seed=1234)
    first = openai_client.chat.completions.create(**kwargs).choices[0].message.content
    second = openai_client.chat.completions.create(**kwargs).choices[0].message.content
    _, streamed = stream_chat_text(openai_client, temperature=1.0, top_p=0.95, max_tokens=24, seed=1234)
    assert first == second == streamed


def test_n_2_gives_two_choices_each_with_its_own_finish(openai_client, http, sse):
    reply = openai_client.chat.completions.create(model="smollm2", messages=CHAT, n=2, max_tokens=12, seed=7)
    assert [c.index for c in reply.choices] == [0, 1]
    assert all(c.finish_reason in ("stop", "length") for c in reply.choices)
    body = {"model": "smollm2", "messages": CHAT, "n": 2, "max_tokens": 12, "seed": 7, "stream": True}
    events = sse(http.post("/v1/chat/completions", json=body))
    assert events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict)]
    for index in (0, 1):
        mine = [c for c in chunks if c["choices"][0]["index"] == index]
        assert mine[0]["choices"][0]["delta"]["role"] == "assistant"
        assert mine[-1]["choices"][0]["finish_reason"] in ("stop", "length")
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in mine)
        assert text == reply.choices[index].message.content  # same seed → same per-choice streams


def test_usage_chunk_only_when_asked(http, sse):
    # ignore_eos: sampled at the default temperature, an early end would change the count.
    body = {"model": "smollm2", "prompt": PROMPT, "max_tokens": 5, "stream": True, "ignore_eos": True}
    plain = [e for e in sse(http.post("/v1/completions", json=body)) if isinstance(e, dict)]
    assert all("usage" not in e for e in plain)
    body["stream_options"] = {"include_usage": True}
    events = sse(http.post("/v1/completions", json=body))
    chunks = [e for e in events if isinstance(e, dict)]
    assert events[-1] == "[DONE]" and chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    assert all(c["usage"] is None for c in chunks[:-1])


def test_openai_client_reads_usage_chunk(openai_client):
    chunks = list(openai_client.chat.completions.create(model="smollm2", messages=CHAT, max_tokens=6, stream=True,
                                                        stream_options={"include_usage": True},
                                                        extra_body={"ignore_eos": True}))
    assert chunks[-1].usage.completion_tokens == 6 and chunks[-1].usage.total_tokens > 6


def test_prompt_array_gives_one_choice_per_prompt(openai_client):
    reply = openai_client.completions.create(model="smollm2", prompt=["One, two,", "Red, green,"], max_tokens=4,
                                             temperature=0)
    assert [c.index for c in reply.choices] == [0, 1]
    single = openai_client.completions.create(model="smollm2", prompt="Red, green,", max_tokens=4, temperature=0)
    assert reply.choices[1].text == single.choices[0].text
    assert reply.usage.completion_tokens == 8


def test_token_id_prompt(openai_client, http):
    ids = http.post("/tokenize", json={"model": "smollm2", "prompt": PROMPT}).json()["tokens"]
    by_ids = openai_client.completions.create(model="smollm2", prompt=ids, max_tokens=8, temperature=0)
    by_text = openai_client.completions.create(model="smollm2", prompt=PROMPT, max_tokens=8, temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text


def test_ignore_eos_and_min_tokens_fix_the_output_length(openai_client):
    reply = openai_client.chat.completions.create(model="smollm2", messages=CHAT, max_tokens=30, temperature=0,
                                                  extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 30 and reply.choices[0].finish_reason == "length"


def test_max_tokens_is_capped_by_the_context(openai_client, http):
    n_ctx = http.get("/v1/models").json()["data"][0]["max_model_len"]
    ids = [216] * (n_ctx - 3)
    reply = openai_client.completions.create(model="smollm2", prompt=ids, max_tokens=50, temperature=0,
                                             extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 3 and reply.choices[0].finish_reason == "length"


def test_prompt_longer_than_context_is_400(openai_client, http):
    n_ctx = http.get("/v1/models").json()["data"][0]["max_model_len"]
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.completions.create(model="smollm2", prompt=[216] * n_ctx, max_tokens=1)
    assert info.value.code == "context_length_exceeded"


def test_unknown_model_is_404(openai_client):
    with pytest.raises(openai.NotFoundError) as info:
        openai_client.chat.completions.create(model="gpt-9", messages=CHAT)
    assert info.value.code == "model_not_found"


def test_strict_unknown_field_is_400_naming_it(openai_client):
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.chat.completions.create(model="smollm2", messages=CHAT, extra_body={"mirostat": 2})
    assert info.value.param == "mirostat"


def test_tokenize_parses_control_tokens_unless_told_not_to(http):
    assert http.post("/tokenize", json={"model": "smollm2", "prompt": "<|im_end|>"}).json()["tokens"] == [2]
    ids = http.post("/tokenize", json={"model": "smollm2", "prompt": "<|im_end|>", "parse_special": False}).json()
    assert 2 not in ids["tokens"]


def test_a_hand_formatted_completion_prompt_is_the_chat_prompt(openai_client, http):
    """llama-server and vLLM tokenize completion prompts with control tokens parsed: a ChatML prompt
    sent to /v1/completions is the same prompt as the chat request it spells out."""
    prompt = "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"
    completion = openai_client.completions.create(model="smollm2", prompt=prompt, max_tokens=1, temperature=0)
    assert completion.usage.prompt_tokens == len(http.post("/tokenize", json={"model": "smollm2", "prompt": prompt})
                                                 .json()["tokens"])
    assert completion.usage.prompt_tokens < 20
