"""Pre-rendered frames: every event is one-line strict-UTF-8 JSON that the openai client's own
models accept, and lane bytes (prefix + escaped text + suffix) decode back to the text."""
import json

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.completion import Completion as CompletionChunk

from gateway.openai.frames import DONE_EVENT, ChoiceResult, StreamFrames, non_stream_body
from gateway.serve.output import SSE_KEEPALIVE as KEEPALIVE_EVENT


def escaped(text: str) -> bytes:
    """What a lane writes between prefix and suffix: the JSON string body, without quotes."""
    return orjson.dumps(text)[1:-1]


def event_json(event: bytes) -> dict:
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    line = event[len(b"data: "):-2]
    assert b"\n" not in line
    return json.loads(line.decode("utf-8"))


def frames(chat=True, usage=False):
    return StreamFrames("chatcmpl-abc" if chat else "cmpl-abc", 1700000000, "smollm2", chat, usage)


@settings(max_examples=300, deadline=None)
@given(text=st.text(), index=st.integers(0, 7), chat=st.booleans(), usage=st.booleans())
def test_content_frames_round_trip_any_text(text, index, chat, usage):
    prefix, suffix = frames(chat, usage).content_framing(index)
    chunk = event_json(prefix + escaped(text) + suffix)
    choice = chunk["choices"][0]
    assert choice["index"] == index and choice["finish_reason"] is None and choice["logprobs"] is None
    assert (choice["delta"]["content"] if chat else choice["text"]) == text
    assert ("usage" in chunk) == usage and chunk.get("usage") is None


def test_chat_stream_shape_is_what_openai_parses():
    f = frames(usage=True)
    prefix, suffix = f.content_framing(0)
    events = [f.role_event(0), prefix + escaped("Hel") + suffix, prefix + escaped("lo\n\"") + suffix,
              f.finish_event(0, "stop")]
    chunks = [ChatCompletionChunk.model_validate(event_json(e)) for e in events]
    assert {c.id for c in chunks} == {"chatcmpl-abc"} and {c.created for c in chunks} == {1700000000}
    assert {c.system_fingerprint for c in chunks} == {"laneserve-0.1.0"}
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == 'Hello\n"'
    assert [c.choices[0].finish_reason for c in chunks] == [None, None, None, "stop"]
    assert event_json(events[-1])["choices"][0]["delta"] == {}
    usage = ChatCompletionChunk.model_validate(event_json(f.usage_event(5, 3)))
    assert usage.choices == [] and usage.usage.total_tokens == 8


def test_usage_null_only_when_asked():
    assert "usage" not in event_json(frames(usage=False).finish_event(0, "length"))
    assert event_json(frames(usage=True).finish_event(0, "length"))["usage"] is None


def test_completion_stream_shape():
    f = frames(chat=False)
    prefix, suffix = f.content_framing(1)
    # openai's Completion model types finish_reason as non-null, but OpenAI and vLLM stream null
    # until the end and the client builds stream chunks without validating; check the shape itself.
    chunk = event_json(prefix + escaped("x") + suffix)
    assert chunk["object"] == "text_completion"
    assert chunk["choices"] == [{"index": 1, "text": "x", "logprobs": None, "finish_reason": None}]
    CompletionChunk.model_validate(event_json(f.finish_event(1, "stop")))
    done = event_json(f.finish_event(1, "length"))["choices"][0]
    assert done == {"index": 1, "text": "", "logprobs": None, "finish_reason": "length"}


def test_done_and_keepalive_events():
    assert DONE_EVENT == b"data: [DONE]\n\n"
    assert KEEPALIVE_EVENT.startswith(b":") and KEEPALIVE_EVENT.endswith(b"\n\n")


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.lists(st.text(), max_size=4), min_size=1, max_size=3), chat=st.booleans())
def test_non_stream_body_splices_escaped_text(texts, chat):
    choices = [ChoiceResult([escaped(t) for t in parts], "stop") for parts in texts]
    body = non_stream_body(completion_id="x", created=1, model="m", chat=chat, choices=choices,
                           prompt_tokens=4, completion_tokens=9)
    parsed = json.loads(body.decode("utf-8"))
    got = [c["message"]["content"] if chat else c["text"] for c in parsed["choices"]]
    assert got == ["".join(parts) for parts in texts]
    model = (ChatCompletion if chat else Completion).model_validate(parsed)
    assert model.usage.total_tokens == 13


def test_generated_text_that_looks_like_a_marker_is_not_touched():
    nasty = escaped("\x00laneserve-split\x00")
    body = non_stream_body(completion_id="x", created=1, model="m", chat=True,
                           choices=[ChoiceResult([nasty], "stop"), ChoiceResult([b"b"], "stop")],
                           prompt_tokens=1, completion_tokens=2)
    parsed = json.loads(body)
    assert [c["message"]["content"] for c in parsed["choices"]] == ["\x00laneserve-split\x00", "b"]


@settings(max_examples=300, deadline=None)
@given(text=st.text(), index=st.integers(0, 7), chat=st.booleans())
def test_the_native_relays_escaping_round_trips_through_content_frames(text, index, chat):
    """The lane's text is escaped by the gateway's native DeltaRelay (csrc/ring/json_escape.cpp),
    not by orjson: what it produces between prefix and suffix must decode back to the text."""
    from lanes import _ring

    prefix, suffix = frames(chat).content_framing(index)
    native = _ring.json_escape(text.encode("utf-8"))
    assert "\u2028".encode() not in native and "\u2029".encode() not in native  # JS-safe lines
    choice = event_json(prefix + native + suffix)["choices"][0]
    assert (choice["delta"]["content"] if chat else choice["text"]) == text


def test_usage_reports_cached_prompt_tokens():
    event = event_json(frames(usage=True).usage_event(5, 3, 4))
    usage = ChatCompletionChunk.model_validate(event).usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (5, 3, 8)
    assert usage.prompt_tokens_details.cached_tokens == 4
    body = non_stream_body(completion_id="x", created=1, model="m", chat=False,
                           choices=[ChoiceResult([b"a"], "stop")], prompt_tokens=6, completion_tokens=1,
                           cached_tokens=2)
    parsed = Completion.model_validate(json.loads(body))
    assert parsed.usage.prompt_tokens_details.cached_tokens == 2 and parsed.usage.total_tokens == 7
    assert json.loads(non_stream_body(completion_id="x", created=1, model="m", chat=True,
                                      choices=[ChoiceResult([b"a"], "stop")], prompt_tokens=1,
                                      completion_tokens=1))["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


def test_extra_fields_come_after_unchanged_openai_fields():
    """gateway.serve.stats' fields ride on the last event / the body; the OpenAI fields stay
    exactly as without them, and the openai client's models still accept the frames."""
    extra = {"ttft": 0.1, "tps": 50.0, "generated_tokens": 3, "timings": {"predicted_n": 3}}
    for chat in (True, False):
        for usage in (True, False):
            f = frames(chat, usage)
            plain, rich = event_json(f.finish_event(0, "stop")), event_json(f.finish_event(0, "stop", extra))
            assert rich == {**plain, **extra} and list(rich)[:len(plain)] == list(plain)
            (ChatCompletionChunk if chat else CompletionChunk).model_validate(rich)
        f = frames(chat, True)
        plain, rich = event_json(f.usage_event(5, 3)), event_json(f.usage_event(5, 3, 0, extra))
        assert rich == {**plain, **extra}
        model = (ChatCompletionChunk if chat else CompletionChunk).model_validate(rich)
        assert model.model_extra["timings"] == {"predicted_n": 3}
        kwargs = dict(completion_id="x", created=1, model="m", chat=chat, choices=[ChoiceResult([b"hi"], "stop")],
                      prompt_tokens=4, completion_tokens=1)
        plain = json.loads(non_stream_body(**kwargs))
        rich = json.loads(non_stream_body(**kwargs, extra={"timings": {"predicted_n": 1}}))
        assert rich == {**plain, "timings": {"predicted_n": 1}}
        (ChatCompletion if chat else Completion).model_validate(rich)
