"""Grammar-constrained decoding in the runtime (csrc/grammar, llguidance through its C API) with the
real SmolLM2: outputs follow regex / JSON-schema / Lark grammars at any temperature, a grammar that
does not compile is refused before the sequence is queued, a constrained sequence and a free one
share batches without changing the free one's tokens, and the same seed gives the same constrained
output alone or batched."""
import json
import re

import pytest

import lanes
from gateway.features.structured import compile_grammar, json_schema_grammar
from lanes import Model, _runtime, grammar

PROMPT = "<|im_start|>user\nTell me about cats.<|im_end|>\n<|im_start|>assistant\n"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                           "lives": {"type": "integer", "minimum": 1, "maximum": 9}},
          "required": ["name", "lives"], "additionalProperties": False}


@pytest.fixture(scope="module")
def model():
    return Model(lanes.smollm2_path(), threads=2, ctx_size=512)


@pytest.fixture(scope="module")
def ids(model):
    return model.tokenize(PROMPT, True, True)


def test_llguidance_is_loaded():
    assert grammar.load() and _runtime.llguidance_loaded()


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.5])
def test_outputs_follow_the_grammar(model, ids, temperature):
    regex = compile_grammar("regex", r"(Yes|No)\. [A-Za-z ]{4,40}\.", "t")
    text = "".join(model.generate(ids, max_tokens=60, temperature=temperature, seed=3, grammar=regex))
    assert re.fullmatch(r"(Yes|No)\. [A-Za-z ]{4,40}\.", text), text
    gen = model.generate(ids, max_tokens=80, temperature=temperature, seed=3, grammar=json_schema_grammar(SCHEMA, "t"))
    value = json.loads("".join(gen))
    assert set(value) == {"name", "lives"} and 1 <= value["lives"] <= 9
    assert model.last_stats.finish_reason == "stop"
    lark = compile_grammar("lark", 'start: "meow" ("!" | "?")', "t")
    assert "".join(model.generate(ids, max_tokens=10, temperature=temperature, seed=3, grammar=lark)) in ("meow!", "meow?")


def test_bad_grammar_is_refused_before_queuing(model, ids):
    with pytest.raises(ValueError, match="grammar"):
        list(model.generate(ids, max_tokens=5, grammar='{"grammars": [{"lark_grammar": "start: undefined"}]}'))
    assert "".join(model.generate(ids, max_tokens=3, temperature=0))  # the engine still serves


def test_constrained_and_free_share_batches(ids):
    engine = _runtime.BatchEngine(str(lanes.smollm2_path()), threads=2, ctx_size=512, num_slots=4, max_batch_tokens=64)
    g = json_schema_grammar(SCHEMA, "t")

    def run(requests):
        for rid, kw in requests:
            engine.add(rid, 0, ids, 40, [], **kw)
        out = {}
        while engine.has_work():
            for rid, _, text, finished, reason, _ in engine.step():
                out[rid] = out.get(rid, b"") + text
        return out

    free = {"temperature": 0.9, "seed": 5}
    constrained = {"temperature": 0.9, "seed": 6, "grammar": g}
    alone_free = run([(1, free)])[1]
    alone_constrained = run([(2, constrained)])[2]
    mixed = run([(3, constrained), (4, free), (5, constrained), (6, {"temperature": 0.0})])
    assert mixed[4] == alone_free  # a batchmate's grammar never touches another sequence
    assert mixed[3] == mixed[5] == alone_constrained  # same seed, same constrained output, batched or not
    json.loads(mixed[3])


@pytest.mark.parametrize("fmt_name", ["hermes", "llama3"])
def test_tool_call_grammars_give_parsable_calls(model, ids, fmt_name):
    import dataclasses

    from gateway.features.tool_calls import parse_all
    from gateway.features.tools import HERMES, LLAMA3, parse_tools, tool_grammar

    fmt = {"hermes": HERMES, "llama3": LLAMA3}[fmt_name]
    tools = parse_tools({"tools": [{"type": "function", "function": {"name": "pet", "parameters": SCHEMA}}],
                         "tool_choice": "required"})
    g = tool_grammar(dataclasses.replace(tools, fmt=fmt))
    text = "".join(model.generate(ids, max_tokens=80, temperature=0.8, seed=9, grammar=g))
    content, calls = parse_all(text, fmt)
    assert len(calls) == 1 and calls[0]["function"]["name"] == "pet", text
    value = json.loads(calls[0]["function"]["arguments"])
    assert set(value) == {"name", "lives"}


def test_a_fresh_engine_builds_its_grammar_compiler_on_first_use_without_stalling_others(ids):
    """The compiler (llguidance's index of the vocabulary: 16 MB for SmolLM2, 110 MB for Gemma 3)
    is built on the first constrained request, in the background: that request waits, a free
    request added after it runs meanwhile, and a grammar that fails to compile then ends its
    request with an error instead of raising."""
    engine = _runtime.BatchEngine(str(lanes.smollm2_path()), threads=2, ctx_size=512, num_slots=4, max_batch_tokens=64)
    bad = '{"grammars": [{"lark_grammar": "start: undefined"}]}'
    engine.add(1, 0, ids, 20, [], temperature=0.0, grammar=json_schema_grammar(SCHEMA, "t"))
    engine.add(2, 0, ids, 20, [], temperature=0.0, grammar=bad)  # deferred too: cannot be refused yet
    engine.add(3, 0, ids, 3, [], temperature=0.0)
    order, text, reasons = [], {}, {}
    while engine.has_work():
        for rid, _, chunk, finished, reason, _ in engine.step():
            if rid not in order:
                order.append(rid)
            text[rid] = text.get(rid, b"") + chunk
            if finished:
                reasons[rid] = reason
    assert order.index(3) < order.index(1)
    assert reasons == {1: "stop", 2: "error", 3: "length"}
    json.loads(text[1])
    with pytest.raises(ValueError, match="grammar"):  # built now: refused before queuing again
        engine.add(4, 0, ids, 5, [], grammar=bad)


def sanitizer_env() -> dict:
    """The sanitizer runtime and options of a .ci/sanitize run, which a clean child needs too."""
    import os

    return {k: v for k, v in os.environ.items() if k == "LD_PRELOAD" or k.endswith("SAN_OPTIONS")}


def test_deferred_library_is_mapped_by_first_use():
    """lanes defer llguidance (grammar.defer): the library is not mapped until something needs it."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "from lanes import _runtime, grammar\n"
        "mapped = lambda: 'llguidance' in open('/proc/self/maps').read()\n"
        "assert grammar.defer() and not mapped()\n"
        "assert _runtime.llguidance_loaded() and mapped()\n"
        "print('ok')\n")
    root = Path(lanes.__file__).resolve().parent.parent  # the imported package, not the source tree
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", **sanitizer_env()}, cwd="/")
    assert out.stdout.strip() == "ok", out.stderr
