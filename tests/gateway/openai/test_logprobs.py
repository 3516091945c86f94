"""gateway.openai.logprobs without a model: request fields, OpenAI shapes (validated by the openai
client's own types), text/logprobs pairing in stream chunks, echo, held-back text."""
import json
import math

import orjson
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from gateway.http.errors import APIError
from gateway.openai.frames import ChoiceResult, StreamFrames, non_stream_body
from gateway.openai.logprobs import RequestScores, TokenStrings, completion_logprobs_object
from gateway.openai.requests import parse_chat, parse_completion
from lanes.api import ScoredChunk

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
COMPLETION = {"model": "m", "prompt": "Once"}

# A toy vocabulary: token 3 and 4 are the two halves of "é" (0xC3 0xA9).
PIECES = {0: b"", 1: b"Hel", 2: b"lo", 3: b"\xc3", 4: b"\xa9", 5: b" world", 6: b"!", 7: b"\n"}


class FakeTokenizer:
    def piece(self, token, special=False):
        return PIECES[token]


STRINGS = TokenStrings(FakeTokenizer())


def rejects(fn, body, param):
    with pytest.raises(APIError) as info:
        fn(body, lenient=False)
    assert info.value.status == 400 and info.value.param == param, info.value.message
    return info.value


# --- request fields ---------------------------------------------------------------------------
def test_chat_fields():
    assert parse_chat(CHAT, lenient=False).sampling.logprobs is None
    assert parse_chat({**CHAT, "logprobs": True}, lenient=False).sampling.logprobs == 0
    assert parse_chat({**CHAT, "logprobs": True, "top_logprobs": 20}, lenient=False).sampling.logprobs == 20
    assert parse_chat({**CHAT, "logprobs": False, "top_logprobs": 0}, lenient=False).sampling.logprobs is None
    rejects(parse_chat, {**CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs")
    rejects(parse_chat, {**CHAT, "logprobs": True, "top_logprobs": -1}, "top_logprobs")
    rejects(parse_chat, {**CHAT, "top_logprobs": 3}, "top_logprobs")  # without logprobs: as OpenAI
    rejects(parse_chat, {**CHAT, "logprobs": False, "top_logprobs": 3}, "top_logprobs")
    rejects(parse_chat, {**CHAT, "logprobs": 1}, "logprobs")  # a boolean on chat
    rejects(parse_chat, {**CHAT, "logprobs": True, "top_logprobs": True}, "top_logprobs")


def test_completion_fields():
    assert parse_completion(COMPLETION, lenient=False).sampling.logprobs is None
    assert parse_completion({**COMPLETION, "logprobs": 0}, lenient=False).sampling.logprobs == 0
    assert parse_completion({**COMPLETION, "logprobs": 5}, lenient=False).sampling.logprobs == 5
    rejects(parse_completion, {**COMPLETION, "logprobs": 6}, "logprobs")
    rejects(parse_completion, {**COMPLETION, "logprobs": True}, "logprobs")  # an integer on completions
    req = parse_completion({**COMPLETION, "echo": True, "max_tokens": 0, "logprobs": 1}, lenient=False)
    assert req.echo and req.sampling.max_tokens == 0
    rejects(parse_completion, {**COMPLETION, "max_tokens": 0}, "max_tokens")  # 0 needs echo (vLLM too)
    rejects(parse_completion, {**COMPLETION, "echo": "yes"}, "echo")


# --- shapes -----------------------------------------------------------------------------------
def pos(token, logprob, *alts):
    return ((token, logprob), tuple(alts))


def test_token_strings_keep_exact_bytes_of_partial_utf8():
    assert STRINGS(3) == ("\ufffd", [0xC3])
    assert STRINGS(4) == ("\ufffd", [0xA9])
    assert STRINGS(1) == ("Hel", list(b"Hel"))


def test_completion_object_offsets_and_top_dicts():
    obj, end = completion_logprobs_object([pos(1, None), pos(2, -0.5, (2, -0.5), (5, -1.5)), pos(6, -3.0, (5, -0.1))],
                                          STRINGS, 10)
    assert obj == {"tokens": ["Hel", "lo", "!"], "token_logprobs": [None, -0.5, -3.0],
                   "top_logprobs": [None, {"lo": -0.5, " world": -1.5}, {" world": -0.1, "!": -3.0}],
                   "text_offset": [10, 13, 15]}
    assert end == 16


def frames(chat):
    return StreamFrames("chatcmpl-x" if chat else "cmpl-x", 1700000000, "m", chat, False)


def event_choices(data: bytes) -> list[dict]:
    events = [e for e in data.split(b"\n\n") if e]
    out = []
    for e in events:
        assert e.startswith(b"data: ")
        chunk = json.loads(e[6:])
        # (The openai client parses completions without validation: OpenAI's own echo answers carry
        # null for the first token, which its strict pydantic types would refuse.)
        if chunk["object"] == "chat.completion.chunk":
            ChatCompletionChunk.model_validate(chunk)
        out.append(chunk["choices"][0])
    return out


def test_chat_stream_text_and_its_logprobs_share_a_chunk_held_back_bytes_ride_later():
    scores = RequestScores(frames(True), STRINGS, report=True, choices=[(None, 3)])
    a = event_choices(scores.events(0, ScoredChunk(0, (pos(1, -0.25, (1, -0.25), (2, -2.0)),), 0, b"Hel")))
    assert a[0]["delta"]["content"] == "Hel"
    entry = a[0]["logprobs"]["content"][0]
    assert entry == {"token": "Hel", "logprob": -0.25, "bytes": list(b"Hel"),
                     "top_logprobs": [{"token": "Hel", "logprob": -0.25, "bytes": list(b"Hel")},
                                      {"token": "lo", "logprob": -2.0, "bytes": list(b"lo")}]}
    # The first half of "é": the lane holds its text back, so nothing goes out yet.
    assert scores.events(0, ScoredChunk(0, (pos(3, -1.0),), 0, b"")) == b""
    b = event_choices(scores.events(0, ScoredChunk(0, (pos(4, -0.1),), 0, "é".encode())))
    assert b[0]["delta"]["content"] == "é"
    got = b[0]["logprobs"]["content"]
    assert [e["bytes"] for e in got] == [[0xC3], [0xA9]]
    assert bytes(sum((e["bytes"] for e in got), [])).decode() == "é"
    # Tokens whose text never came (a stop string's end) go out before the finish chunk.
    assert scores.events(0, ScoredChunk(0, (pos(6, -0.7),), 0, b"")) == b""
    tail = event_choices(scores.final_events(0))
    assert tail[0]["delta"]["content"] == "" and tail[0]["logprobs"]["content"][0]["token"] == "!"
    assert scores.final_events(0) == b""


def test_completion_stream_echo_comes_first_with_null_first_logprob():
    scores = RequestScores(frames(False), STRINGS, report=True, choices=[("Hello", 2)])
    # Prompt positions may come over several lane steps; the echo waits for all of them.
    assert scores.events(0, ScoredChunk(0, (pos(1, None),), 1, b"")) == b""
    out = event_choices(scores.events(0, ScoredChunk(0, (pos(2, -1.5, (5, -0.2)), pos(5, -0.3, (5, -0.3))), 1,
                                                     b" world")))
    assert [c["text"] for c in out] == ["Hello", " world"]
    assert out[0]["logprobs"] == {"tokens": ["Hel", "lo"], "token_logprobs": [None, -1.5],
                                  "top_logprobs": [None, {" world": -0.2, "lo": -1.5}], "text_offset": [0, 3]}
    assert out[1]["logprobs"]["text_offset"] == [5]


def test_echo_without_logprobs_reports_none():
    scores = RequestScores(frames(False), STRINGS, report=False, choices=[("Hello", 2)])
    out = event_choices(scores.events(0, ScoredChunk(0, (pos(1, None), pos(2, -1.5)), 2, b"")))
    assert out == [{"index": 0, "text": "Hello", "logprobs": None, "finish_reason": None}]


@pytest.mark.parametrize("chat", [True, False])
def test_non_stream_body_carries_logprobs(chat):
    scores = RequestScores(frames(chat), STRINGS, report=True,
                           choices=[(None if chat else "Hello", 2), (None if chat else "Hello", 2)])
    results = [ChoiceResult([], "stop"), ChoiceResult([], "length")]
    for i in range(2):
        scores.collect(i, ScoredChunk(i, (pos(1, None), pos(2, -1.0)) if not chat else (), 0 if chat else 2, b""))
        scores.collect(i, ScoredChunk(i, (pos(3, -0.5, (3, -0.5)),), 0, b""))
        scores.collect(i, ScoredChunk(i, (pos(4, -0.25, (4, -0.25)),), 0, "é".encode()))
    scores.fill(results)
    body = json.loads(non_stream_body(completion_id="x", created=1, model="m", chat=chat, choices=results,
                                      prompt_tokens=2, completion_tokens=2))
    if chat:
        ChatCompletion.model_validate(body)
    for choice in body["choices"]:
        lp = choice["logprobs"]
        if chat:
            assert choice["message"]["content"] == "é"
            assert bytes(sum((e["bytes"] for e in lp["content"]), [])).decode() == "é"
        else:
            assert choice["text"] == "Helloé"
            assert lp["tokens"][:2] == ["Hel", "lo"] and lp["token_logprobs"][0] is None
            assert lp["text_offset"] == [0, 3, 5, 6]
            assert all(math.isfinite(v) for v in lp["token_logprobs"][1:])


def test_escaping_of_collected_text():
    scores = RequestScores(frames(True), STRINGS, report=True, choices=[(None, 1)])
    scores.collect(0, ScoredChunk(0, (pos(7, -0.1),), 0, b'"\n'))
    results = [ChoiceResult([], "stop")]
    scores.fill(results)
    assert results[0].escaped == [orjson.dumps('"\n')[1:-1]]


# --- Ollama -----------------------------------------------------------------------------------
def test_ollama_fields():
    from gateway.ollama.requests import OllamaError, parse_chat as ollama_chat

    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    assert ollama_chat(body).params.logprobs is None
    assert ollama_chat({**body, "logprobs": True}).params.logprobs == 0
    assert ollama_chat({**body, "logprobs": True, "top_logprobs": 20}).params.logprobs == 20
    for bad in ({"logprobs": True, "top_logprobs": 21}, {"top_logprobs": 2}, {"logprobs": "yes"},
                {"logprobs": True, "top_logprobs": 1.5}):
        with pytest.raises(OllamaError) as info:
            ollama_chat({**body, **bad})
        assert info.value.status == 400


def test_ollama_lines_pair_text_and_logprobs():
    from gateway.ollama.frames import OllamaFrames
    from gateway.ollama.logprobs import OllamaScores

    class Text:
        tokenizer = FakeTokenizer()

    scores = OllamaScores(OllamaFrames("m", chat=True), Text())
    assert scores.line(ScoredChunk(0, (pos(3, -1.0),), 0, b"")) == b""
    first = json.loads(scores.line(ScoredChunk(0, (pos(4, -0.5, (4, -0.5)),), 0, "é".encode())))
    assert first["message"]["content"] == "é" and first["done"] is False
    assert [e["bytes"] for e in first["logprobs"]] == [[0xC3], [0xA9]]
    assert first["logprobs"][1]["top_logprobs"] == [{"token": "\ufffd", "logprob": -0.5, "bytes": [0xA9]}]
    assert scores.line(ScoredChunk(0, (pos(6, -0.2),), 0, b"")) == b""
    held = json.loads(scores.held_line())
    assert held["message"]["content"] == "" and held["logprobs"][0]["token"] == "!"
    assert scores.text() == "é"
