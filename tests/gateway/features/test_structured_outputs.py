"""Structured outputs through the real `openai` and `ollama` clients against a real server with
SmolLM2: a battery of JSON schemas at temperature 0 and 0.8 (every output parses and validates),
regex / GBNF / choice grammars under every API's name, compile errors as 400s before any lane
work, and constrained requests batched with free ones without changing the free ones' tokens."""
from __future__ import annotations

import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import ollama
import openai
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "data"))
from json_schemas import SCHEMAS  # noqa: E402

pytestmark = pytest.mark.real_model
MAX_TOKENS = 300


def _ask(client, name, prompt, schema, temperature):
    reply = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": prompt + " Answer in JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
        temperature=temperature, seed=11, max_tokens=MAX_TOKENS)
    return reply.choices[0]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_schema_battery_outputs_parse_and_validate(openai_client, temperature):
    assert len(SCHEMAS) >= 30
    with ThreadPoolExecutor(8) as pool:  # eight at a time: they share the lane's batches
        choices = list(pool.map(lambda s: _ask(openai_client, *s, temperature), SCHEMAS))
    failures = []
    for (name, _, schema), choice in zip(SCHEMAS, choices):
        try:
            jsonschema.validate(json.loads(choice.message.content), schema, format_checker=jsonschema.FormatChecker())
            assert choice.finish_reason == "stop"
        except (ValueError, AssertionError, jsonschema.ValidationError) as exc:
            failures.append(f"{name}: {choice.finish_reason} {choice.message.content[:120]!r} ({type(exc).__name__})")
    assert not failures, failures


def test_json_object_and_llama_server_schema(openai_client, http):
    reply = openai_client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Give the name and age of a person as JSON."}],
        response_format={"type": "json_object"}, temperature=0.8, seed=3, max_tokens=MAX_TOKENS)
    if reply.choices[0].finish_reason == "stop":
        assert type(json.loads(reply.choices[0].message.content)) is dict
    else:  # cut by the token limit: still a JSON object being written
        assert reply.choices[0].message.content.startswith("{")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
    for body in ({"response_format": {"type": "json_object", "schema": schema}}, {"json_schema": schema},
                 {"guided_json": schema}, {"structured_outputs": {"json": schema}}):
        r = http.post("/v1/chat/completions", json={"model": "smollm2", "max_tokens": 40, "temperature": 0,
                                                    "messages": [{"role": "user", "content": "Is it ok?"}], **body})
        assert r.status_code == 200, (body, r.text)
        assert json.loads(r.json()["choices"][0]["message"]["content"]) in ({"ok": True}, {"ok": False})


def test_regex_gbnf_lark_and_choice_grammars(openai_client):
    def complete(**extra):
        return openai_client.completions.create(model="smollm2", prompt="Q: Is the sky blue?\nA:", max_tokens=40,
                                                temperature=0.8, seed=4, extra_body=extra).choices[0].text
    assert re.fullmatch(r"(Yes|No), [a-z ]{3,20}\.", complete(guided_regex=r"(Yes|No), [a-z ]{3,20}\."))
    assert re.fullmatch(r"The answer is [0-9]+\.", complete(grammar='root ::= "The answer is " [0-9]+ "."'))
    assert re.fullmatch(r"(yes|no)!", complete(guided_grammar='root ::= ("yes" | "no") "!"'))
    assert complete(guided_grammar='start: "maybe" | "surely"') in ("maybe", "surely")
    assert complete(guided_choice=["blue", "green"]) in ("blue", "green")
    assert complete(structured_outputs={"regex": "[A-Z]{3}"}).isupper()
    chat = openai_client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Pick a fruit"}], max_tokens=10,
        extra_body={"structured_outputs": {"choice": ["apple", "pear"]}})
    assert chat.choices[0].message.content in ("apple", "pear")


@pytest.mark.parametrize("extra, param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objectx"}}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"guided_regex": "[a-"}, "guided_regex"),
    ({"grammar": "root ::= undefined_rule"}, "grammar"),
    ({"guided_json": "{not json"}, "guided_json"),
    ({"guided_choice": []}, "guided_choice"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
    ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_choice"),
])
def test_invalid_grammars_are_400_naming_the_field(openai_client, extra, param):
    with pytest.raises(openai.BadRequestError) as info:
        openai_client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "x"}],
                                              max_tokens=5, extra_body=extra)
    assert info.value.body["param"] == param, info.value.body


def test_constrained_and_free_requests_share_a_batch(openai_client):
    free = dict(model="smollm2", prompt="The history of Rome", max_tokens=40, temperature=0.9, seed=21)
    alone = openai_client.completions.create(**free).choices[0].text
    schema = SCHEMAS[0][2]

    def constrained(i):
        return _ask(openai_client, "person", "Describe a person.", schema, 0.8).message.content

    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(constrained, i) for i in range(4)]
        mixed = pool.submit(lambda: openai_client.completions.create(**free).choices[0].text)
        outputs = [f.result() for f in futures]
    assert mixed.result() == alone  # the free sequence's tokens do not depend on its batchmates
    for text in outputs:
        jsonschema.validate(json.loads(text), schema)


def test_ollama_format_json_and_schema(base_url):
    client = ollama.Client(host=base_url, timeout=120)
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "legs": {"type": "integer", "minimum": 0, "maximum": 8}},
              "required": ["name", "legs"], "additionalProperties": False}
    reply = client.chat(model="smollm2", messages=[{"role": "user", "content": "Describe an animal."}],
                        format=schema, options={"temperature": 0, "num_predict": 100})
    jsonschema.validate(json.loads(reply.message.content), schema)
    reply = client.generate(model="smollm2", prompt="A JSON object about cats:", format="json",
                            options={"temperature": 0.7, "seed": 2, "num_predict": 150})
    assert reply.response.startswith("{")
    with pytest.raises(ollama.ResponseError) as info:
        client.generate(model="smollm2", prompt="x", format={"type": "objectx"})
    assert info.value.status_code == 400 and "format" in str(info.value)
