"""The Responses API without a model: validation, the conversation read from `input`, the
store's bounds, and the events' numbering (a plain answer's deltas numbered by the relay)."""
import base64

import orjson
import pytest

from gateway.http.errors import APIError
from gateway.responses.conversation import input_messages
from gateway.responses.events import ResponseEvents
from gateway.responses.items import OutputItems
from gateway.responses.requests import parse_responses
from gateway.responses.store import ResponseStore
from gateway.features.tools import HERMES
from gateway.serve.output import marked_pieces
from gateway.vision.parts import IMAGE_MARKER, RequestImage


def _parse(**body):
    return parse_responses({"model": "m", "input": "hi", **body}, lenient=False)


def _error(**body) -> APIError:
    with pytest.raises(APIError) as info:
        _parse(**body)
    return info.value


def test_defaults_and_echo():
    r = _parse()
    assert r.messages == ({"role": "user", "content": "hi"},)
    assert r.store is True and r.previous_response_id is None and r.tools is None and r.think is None
    assert r.sampling.max_tokens is None and r.sampling.grammar is None and not r.sampling.stream
    assert r.echo["tool_choice"] == "auto" and r.echo["text"]["format"] == {"type": "text"}
    assert r.echo["temperature"] == 1.0 and r.echo["top_p"] == 1.0 and r.echo["metadata"] == {}


@pytest.mark.parametrize("body, param", [
    ({"bogus": 1}, "bogus"),
    ({"input": None}, "input"),
    ({"input": []}, "input"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"temperature": 3}, "temperature"),
    ({"background": True}, "background"),
    ({"include": ["reasoning.encrypted_content"]}, "include"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
    ({"text": {"format": {"type": "json_schema", "schema": {"type": "object"}, "strict": "yes"}}}, "text.format.strict"),
    ({"text": {"colour": 1}}, "text.colour"),
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({"tools": [{"type": "function"}]}, "tools[0].name"),
    ({"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"metadata": {"k": 1}}, "metadata"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
    ({"input": [{"role": "user", "content": "x", "colour": 1}]}, "input[0]"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
])
def test_bad_fields_name_the_parameter(body, param):
    error = _error(**body)
    assert error.status == 400 and error.param == param, (error.param, error.message)


def test_client_output_items_come_back_as_history():
    """Items as the openai client returns them (ids, statuses, annotations) are accepted; consecutive
    function calls join one assistant turn; reasoning is not rendered again; tool turns get the name."""
    items = [
        {"role": "developer", "content": "be brief"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": [], "logprobs": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "w", "arguments": '{"c":"P"}',
         "status": "completed"},
        {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "w", "arguments": '{"c":"B"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "rain"}]},
    ]
    messages = input_messages(items)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool"]
    assert messages[2]["content"] == "Checking."
    assert [c["function"]["arguments"] for c in messages[2]["tool_calls"]] == [{"c": "P"}, {"c": "B"}]
    assert messages[3] == {"role": "tool", "content": "sunny", "tool_call_id": "call_a", "name": "w"}
    assert messages[4]["content"] == "rain"


PNG_URI = "data:image/png;base64," + base64.b64encode(b"\x89PNG fake bytes").decode()


def test_input_image_parts_become_markers_and_images_in_order():
    r = _parse(input=[{"role": "user", "content": [
        {"type": "input_text", "text": "A "}, {"type": "input_image", "image_url": PNG_URI, "detail": "auto"},
        {"type": "input_text", "text": " B"}, {"type": "input_image", "image_url": {"url": PNG_URI}}]}])
    assert r.messages == ({"role": "user", "content": f"A {IMAGE_MARKER} B{IMAGE_MARKER}"},)
    assert [im.where for im in r.images] == ["input[0].content[1]", "input[0].content[3]"]
    assert r.images[0].data == b"\x89PNG fake bytes"
    assert _parse().images == ()


@pytest.mark.parametrize("part, status, code, message", [
    ({"type": "input_image", "file_id": "file-1"}, 400, "unsupported_parameter",
     "input[0].content[1]: images by file_id are not supported"),
    ({"type": "input_image", "image_url": "https://127.0.0.1:9/a.png"}, 400, "invalid_image",
     "input[0].content[1]: image URLs are not fetched"),
    ({"type": "input_image", "image_url": "data:image/png;base64,@@"}, 400, "invalid_image",
     "input[0].content[1]: the image is not valid base64"),
    ({"type": "input_image", "image_url": "data:image/png;base64," + "A" * (28 * 1024 * 1024)}, 413,
     "image_too_large", "input[0].content[1]: the image is larger than the limit"),
    ({"type": "input_image", "image_url": PNG_URI, "colour": 1}, 400, "unknown_parameter", "colour"),
    ({"type": "input_file", "file_id": "file-1"}, 400, "unsupported_parameter", "input_file"),
])
def test_bad_input_images_name_the_part(part, status, code, message):
    error = _error(input=[{"role": "user", "content": [{"type": "input_text", "text": "x"}, part]}])
    assert (error.status, error.param, error.code) == (status, "input[0].content[1]", code), error.message
    assert message in error.message


def test_flat_tools_and_named_choice():
    r = _parse(tools=[{"type": "function", "name": "f", "description": "d", "strict": True,
                       "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}],
               tool_choice={"type": "function", "name": "f"}, parallel_tool_calls=True)
    assert r.tools.choice == "named" and r.tools.name == "f" and r.tools.parallel
    assert r.tools.functions[0]["parameters"]["properties"] == {"x": {"type": "integer"}}
    assert _parse(tools=[{"type": "function", "name": "f"}], tool_choice="none").tools.active is False


def test_json_schema_format_compiles_a_grammar_and_effort_switches_thinking():
    r = _parse(text={"format": {"type": "json_schema", "name": "p", "schema": {"type": "object"}, "strict": True}})
    assert r.sampling.grammar and r.sampling.grammar_param == "text.format"
    assert _parse(reasoning={"effort": "none"}).think is False
    assert _parse(reasoning={"effort": "low"}).think is True


def test_store_keeps_the_newest_and_forgets_by_age(monkeypatch):
    store = ResponseStore(max_entries=2, max_age_s=10)
    for i in range(3):
        store.put(f"r{i}", {"id": f"r{i}"}, ())
    assert store.get("r0") is None and store.get("r2").body == {"id": "r2"} and len(store) == 2
    assert store.delete("r1") and not store.delete("r1")
    import gateway.responses.store as module
    now = module.time.monotonic_ns()
    monkeypatch.setattr(module.time, "monotonic_ns", lambda: now + 11 * 10**9)
    assert store.get("r2") is None and len(store) == 0
    off = ResponseStore(max_entries=0, max_age_s=10)
    off.put("x", {}, ())
    assert off.get("x") is None


def test_store_keeps_images_within_its_byte_bound():
    """A conversation's images are stored with it; past max_image_bytes the oldest responses go first."""
    store = ResponseStore(max_entries=10, max_age_s=10, max_image_bytes=100)
    pic = RequestImage("input[0].content[0]", b"x" * 40)
    store.put("a", {}, (), (pic,))
    store.put("b", {}, (), (pic, pic))  # a continuation counts its history's images again: 40 + 80 > 100
    assert store.get("a") is None and store.get("b").images == (pic, pic)
    store.put("c", {}, ())
    assert store.get("b") is not None and store.delete("b")
    store.put("d", {}, (), (pic, pic))  # b's bytes were released by its deletion
    assert store.get("d") is not None and store.get("c") is not None
    store.put("e", {}, (), (RequestImage("x", b"y" * 101),))  # larger than the whole bound: not kept
    assert store.get("e") is None and store.get("d") is not None


def _decode(events: bytes) -> list[dict]:
    out = []
    for block in events.split(b"\n\n"):
        if block:
            kind, data = block.split(b"\n")
            event = orjson.loads(data[len(b"data: "):])
            assert kind == b"event: " + event["type"].encode()
            out.append(event)
    return out


def test_text_framing_numbers_on_from_the_opening():
    events = ResponseEvents("m", {}, None, True)
    items = OutputItems(events)
    opening = events.event("response.created", response={}) + items.open_message()
    framing = events.text_framing(items.items[0]["id"], 0)
    assert framing.first_number == 3 == len(_decode(opening))
    delta = framing.prefix + b"7" + framing.middle + b"a\\\"b" + framing.suffix
    [event] = _decode(delta)
    assert event == {"type": "response.output_text.delta", "sequence_number": 7, "item_id": items.items[0]["id"],
                     "output_index": 0, "content_index": 0, "delta": 'a"b', "logprobs": []}


def test_items_from_marked_text_reasoning_message_and_calls():
    events = ResponseEvents("m", {}, None, True)
    items = OutputItems(events, HERMES)
    call_text = orjson.dumps(' <tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>')[1:-1]
    data = b"\x01Hmm\x01 ok\x00Sure.\x00" + call_text + b"\x00\\n"  # lane deltas: a mark + escaped text
    out = b""
    for reasoning, text in marked_pieces(data):
        out += items.reasoning(text) if reasoning else items.text(text)
    out += items.finish("completed")
    decoded = _decode(out)
    assert [e["sequence_number"] for e in decoded] == list(range(len(decoded)))
    assert [i["type"] for i in items.items] == ["reasoning", "message", "function_call"]
    assert items.items[0]["content"] == [{"type": "reasoning_text", "text": "Hmm ok"}]
    assert items.items[1]["content"][0]["text"] == "Sure. "
    call = items.items[2]
    assert call["name"] == "f" and orjson.loads(call["arguments"]) == {"x": 1} and call["status"] == "completed"
    kinds = [e["type"] for e in decoded]
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == 3
    assert kinds[-2:] == ["response.function_call_arguments.done", "response.output_item.done"]  # "\n" held
    assert "".join(e["delta"] for e in decoded if e["type"] == "response.function_call_arguments.delta") \
        == call["arguments"]
