"""The Responses API through the real `openai` client (responses.create / .stream / .retrieve /
.delete) against a real SmolLM2 server; reasoning items on the scripted thinking model."""
import json

import httpx
import jsonschema
import openai
import pytest

from .. import thinking_gguf

pytestmark = pytest.mark.real_model

GREEDY = {"temperature": 0}
QUESTION = "What is the capital of France?"
WEATHER = [{"type": "function", "name": "get_weather", "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                           "additionalProperties": False}, "strict": True}]
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def _stream(client, **kwargs):
    with client.responses.stream(model=kwargs.pop("model", "smollm2"), **kwargs) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    return events, final


def test_plain_answer_and_the_same_text_as_chat_completions(openai_client):
    r = openai_client.responses.create(model="smollm2", input=QUESTION, max_output_tokens=24, **GREEDY)
    assert r.id.startswith("resp_") and r.object == "response" and r.status == "completed"
    [message] = r.output
    assert message.type == "message" and message.id.startswith("msg_") and message.status == "completed"
    assert r.output_text and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.usage.input_tokens_details.cached_tokens >= 0 and r.model == "smollm2"
    chat = openai_client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": QUESTION}],
                                                 max_tokens=24, **GREEDY)
    assert chat.choices[0].message.content == r.output_text
    assert chat.usage.prompt_tokens == r.usage.input_tokens


def test_stream_events_in_order_and_deltas_make_the_text(openai_client):
    events, final = _stream(openai_client, input=QUESTION, max_output_tokens=24, **GREEDY)
    kinds = [e.type for e in events]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[4:4 + len(deltas)] == ["response.output_text.delta"] * len(deltas) and len(deltas) >= 2
    assert kinds[4 + len(deltas):] == ["response.output_text.done", "response.content_part.done",
                                       "response.output_item.done", "response.completed"]
    item_id = events[2].item.id
    assert all(e.item_id == item_id and e.output_index == 0 and e.content_index == 0 for e in deltas)
    text = "".join(e.delta for e in deltas)
    assert text == events[-4].text == final.output_text and final.output[0].id == item_id
    assert final.id == events[0].response.id and final.usage.output_tokens > 0
    plain = openai_client.responses.create(model="smollm2", input=QUESTION, max_output_tokens=24, **GREEDY)
    assert plain.output_text == text


def test_instructions_and_a_multi_turn_input(openai_client):
    r = openai_client.responses.create(
        model="smollm2", instructions="Answer with one word.", max_output_tokens=16, **GREEDY,
        input=[{"role": "user", "content": "Name a colour."},
               {"role": "assistant", "content": [{"type": "output_text", "text": "Blue.", "annotations": []}]},
               {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Another one?"}]}])
    assert r.status == "completed" and r.output_text and r.instructions == "Answer with one word."


def test_previous_response_id_chains_retrieve_and_delete(openai_client):
    first = openai_client.responses.create(model="smollm2", input="My name is Ada.", max_output_tokens=16, **GREEDY)
    second = openai_client.responses.create(model="smollm2", input="What is my name?", previous_response_id=first.id,
                                            max_output_tokens=16, **GREEDY)
    assert second.previous_response_id == first.id
    # The chain is the conversation: the second prompt holds the first turn and its answer.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    got = openai_client.responses.retrieve(second.id)
    assert got.id == second.id and got.output_text == second.output_text and got.status == second.status
    openai_client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError) as info:
        openai_client.responses.create(model="smollm2", input="x", previous_response_id=first.id)
    assert info.value.body["param"] == "previous_response_id"
    unstored = openai_client.responses.create(model="smollm2", input="hi", store=False, max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.retrieve(unstored.id)


def test_json_schema_output_validates(openai_client):
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    r = openai_client.responses.create(model="smollm2", input="Invent a person with a name and an age.",
                                       text={"format": fmt}, max_output_tokens=64, **GREEDY)
    jsonschema.validate(json.loads(r.output_text), PERSON)
    assert r.text.format.type == "json_schema"
    events, final = _stream(openai_client, input="Invent a person.", text={"format": fmt}, max_output_tokens=64,
                            **GREEDY)
    jsonschema.validate(json.loads(final.output_text), PERSON)


def test_forced_tool_call_then_its_result(openai_client):
    choice = {"type": "function", "name": "get_weather"}
    r = openai_client.responses.create(model="smollm2", input="What is the weather in Paris?", tools=WEATHER,
                                       tool_choice=choice, max_output_tokens=64, **GREEDY)
    [call] = r.output
    assert call.type == "function_call" and call.id.startswith("fc_") and call.call_id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), WEATHER[0]["parameters"])
    follow = openai_client.responses.create(
        model="smollm2", previous_response_id=r.id, tools=WEATHER, max_output_tokens=32, **GREEDY,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}])
    assert follow.status == "completed" and follow.output
    # The same turn sent as a whole, the client's own output items included.
    whole = openai_client.responses.create(
        model="smollm2", tools=WEATHER, max_output_tokens=32, **GREEDY,
        input=[{"role": "user", "content": "What is the weather in Paris?"}, call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}])
    assert whole.output_text == follow.output_text


def test_streamed_tool_call(openai_client):
    events, final = _stream(openai_client, input="What is the weather in Paris?", tools=WEATHER,
                            tool_choice="required", max_output_tokens=64, **GREEDY)
    call = final.output[-1]
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert call.type == "function_call" and args == call.arguments
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done[0].arguments == args and done[0].item_id == call.id


def test_token_limit_is_incomplete(openai_client):
    # Greedy: a sampled answer could end on its own within 4 tokens.
    r = openai_client.responses.create(model="smollm2", input="Count from one to one hundred.", max_output_tokens=4,
                                       **GREEDY)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].status == "incomplete" and r.usage.output_tokens == 4
    events = list(openai_client.responses.create(model="smollm2", input="Count from one to one hundred.",
                                                 max_output_tokens=4, stream=True, **GREEDY))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.incomplete" and events[-1].response.incomplete_details.reason == \
        "max_output_tokens"
    assert events[-2].type == "response.output_item.done" and events[-2].item.status == "incomplete"


@pytest.mark.parametrize("body, status, param", [
    ({"model": "nope", "input": "x"}, 404, "model"),
    ({"model": "smollm2", "input": "x", "bogus": 1}, 400, "bogus"),
    ({"model": "smollm2"}, 400, "input"),
    ({"model": "smollm2", "input": "x", "max_output_tokens": 100000}, 400, "max_output_tokens"),
    ({"model": "smollm2", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     400, "input[0].content[0]"),
])
def test_errors_in_the_openai_shape(http, body, status, param):
    r = http.post("/v1/responses", json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]
    assert http.get("/v1/responses/resp_missing").status_code == 404
    assert http.delete("/v1/responses/resp_missing").json()["error"]["code"] == "response_not_found"


def test_reasoning_items_on_a_thinking_model(think_server):
    client = openai.OpenAI(base_url=think_server.base_url + "/v1", api_key="x", max_retries=0, timeout=60)
    r = client.responses.create(model="think", input="What is the answer?", reasoning={"effort": "high"}, **GREEDY)
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == thinking_gguf.REASONING and r.output_text == thinking_gguf.CONTENT
    events, final = _stream(client, model="think", input="What is the answer?", **GREEDY)
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert reasoning == thinking_gguf.REASONING and final.output_text == thinking_gguf.CONTENT
    kinds = [e.type for e in events]
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    off = client.responses.create(model="think", input="What is the answer?", reasoning={"effort": "none"}, **GREEDY)
    assert [o.type for o in off.output] == ["message"] and off.output_text == thinking_gguf.CONTENT
    with httpx.Client(base_url=think_server.base_url) as http:
        refused = http.post("/v1/responses", json={"model": "smollm2", "input": "x", "reasoning": {"effort": "low"}})
    assert refused.status_code == 400


def test_records_and_metrics_carry_the_route_name(server, openai_client, http):
    openai_client.responses.create(model="smollm2", input="hi", max_output_tokens=2,
                                   extra_headers={"X-Request-ID": "responses-record"})
    [record] = server.records("responses-record")
    assert (record["route"], record["outcome"], record["completion_tokens"]) == ("responses", "success", 2)
    assert 'route="responses"' in http.get("/metrics").text
