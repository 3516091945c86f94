"""The Ollama protocol through the real `ollama` client (sync and async) and raw httpx against a
real server with SmolLM2: chat, generate, options, tags, show, ps, version, errors, NDJSON bytes."""
from __future__ import annotations

import json

import httpx
import ollama
import pytest

from gateway.cli.bench.synthetic import synthetic_text

pytestmark = pytest.mark.real_model

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
DURATIONS = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
             "eval_duration")


@pytest.fixture
def client(base_url):
    return ollama.Client(host=base_url, timeout=60)


def check_final(obj: dict, max_tokens: int) -> None:
    assert obj["done"] is True and obj["done_reason"] in ("stop", "length")
    for key in DURATIONS:
        assert type(obj[key]) is int and obj[key] >= 0, key
    assert 1 <= obj["eval_count"] <= max_tokens and obj["prompt_eval_count"] > 5
    assert obj["total_duration"] >= obj["eval_duration"] > 0
    if "tps" in obj:  # raw lines; the ollama client's models drop keys they do not know
        assert obj["tps"] > 0 and obj["ttft"] > 0
    assert obj["created_at"].endswith("Z") and "T" in obj["created_at"]


def test_chat_non_stream_and_stream_through_the_client(client):
    reply = client.chat(model="smollm2", messages=MESSAGES, options={"num_predict": 12, "temperature": 0})
    assert reply.message.role == "assistant" and reply.message.content
    check_final(reply.model_dump(), 12)
    parts = list(client.chat(model="smollm2", messages=MESSAGES, stream=True,
                             options={"num_predict": 12, "temperature": 0}))
    assert all(p.message.role == "assistant" for p in parts)
    assert [p.done for p in parts].count(True) == 1 and parts[-1].done
    assert "".join(p.message.content for p in parts) == reply.message.content  # greedy: same text
    check_final(parts[-1].model_dump(), 12)


async def test_async_client_chat_and_generate(base_url):
    client = ollama.AsyncClient(host=base_url, timeout=60)
    reply = await client.chat(model="smollm2:latest", messages=MESSAGES, options={"num_predict": 6})
    assert reply.message.content and reply.done_reason in ("stop", "length")
    text = ""
    async for part in await client.generate(model="smollm2", prompt="Once upon a time", stream=True,
                                            options={"num_predict": 8, "temperature": 0}):
        text += part.response
        if part.done:
            assert part.context and part.eval_count == 8 and part.done_reason == "length"
    assert text


def test_generate_options_stop_seed_and_context(client):
    a = client.generate(model="smollm2", prompt="Count: one, two,", options={"num_predict": 10, "seed": 7,
                                                                          "temperature": 0.9})
    b = client.generate(model="smollm2", prompt="Count: one, two,", options={"num_predict": 10, "seed": 7,
                                                                          "temperature": 0.9})
    assert a.response == b.response and 1 <= a.eval_count <= 10
    stopped = client.generate(model="smollm2", prompt="Count: one, two,", raw=True,
                              options={"num_predict": 30, "temperature": 0, "repeat_penalty": 1.0, "stop": [","]})
    assert "," not in stopped.response and stopped.done_reason == "stop"
    # context = the tokens of the exchange; sending it back continues after the answer
    assert len(a.context) > a.prompt_eval_count
    follow = client.generate(model="smollm2", prompt="And then?", context=a.context, options={"num_predict": 4})
    assert follow.prompt_eval_count > len(a.context)


def test_raw_prompts_are_tokenized_with_control_tokens(client):
    """Ollama's raw mode: the caller formats the prompt, so "<|im_start|>" is that token and a raw
    prompt spelling out the chat template is the templated prompt."""
    prompt = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    options = {"num_predict": 8, "temperature": 0}
    raw = client.generate(model="smollm2", prompt=prompt, raw=True, options=options)
    templated = client.generate(model="smollm2", prompt="Hi", options=options)
    assert raw.context[0] == 1 and raw.prompt_eval_count == templated.prompt_eval_count
    assert raw.response == templated.response


def test_unknown_options_are_ignored_and_bad_types_are_400(client):
    ok = client.generate(model="smollm2", prompt="Hi", options={"num_predict": 3, "mirostat": 2, "num_gpu": 1,
                                                              "penalize_newline": True, "num_ctx": 4096})
    assert ok.eval_count <= 3
    with pytest.raises(ollama.ResponseError) as e:
        client.generate(model="smollm2", prompt="Hi", options={"temperature": "hot"})
    assert e.value.status_code == 400 and "temperature" in e.value.error


def test_unknown_model_and_thinking_on_a_model_without_it(client):
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="nope", messages=MESSAGES)
    assert e.value.status_code == 404 and "not found" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="smollm2", messages=MESSAGES, think=True)
    assert e.value.status_code == 400 and "thinking" in e.value.error


def test_errors_the_server_raises_under_api_have_ollamas_shape(client, http):
    """Routes we do not serve, wrong methods: the ollama client reads {"error": str}."""
    for method, path, status in (("POST", "/api/pull", 404), ("POST", "/api/copy", 404), ("GET", "/api/chat", 405)):
        r = http.request(method, path, json={"model": "x"} if method == "POST" else None)
        assert r.status_code == status and type(r.json()["error"]) is str, (path, r.text)
    with pytest.raises(ollama.ResponseError) as e:
        client.pull("smollm2")
    assert e.value.status_code == 404 and e.value.error == "no such route"
    assert type(http.post("/v1/nope", json={}).json()["error"]) is dict  # elsewhere: OpenAI's envelope


def test_the_model_name_is_echoed_as_requested(http):
    """Ollama answers with the name the request used, tag and all."""
    for name in ("smollm2", "smollm2:latest"):
        body = {"model": name, "prompt": "Hi", "stream": False, "options": {"num_predict": 2}}
        assert http.post("/api/generate", json=body).json()["model"] == name


def test_tags_show_ps_version(client, http):
    listed = client.list()
    names = [m.model for m in listed.models]
    assert "smollm2" in names
    entry = listed.models[names.index("smollm2")]
    assert entry.details.format == "gguf" and entry.details.family == "llama"
    assert entry.details.quantization_level == "Q4_1" and entry.details.parameter_size == "135M"
    assert len(entry.digest) == 64 and entry.size > 90_000_000
    shown = client.show("smollm2")
    assert "<|im_start|>" in shown.template and shown.capabilities == ["completion", "tools"]
    assert shown.modelinfo["general.architecture"] == "llama" and shown.details.family == "llama"
    running = client.ps()
    assert [m.model for m in running.models] == ["smollm2"]
    version = http.get("/api/version").json()
    assert isinstance(version["version"], str)
    root = http.get("/")
    assert root.status_code == 200 and root.text == "Ollama is running"
    assert http.head("/").status_code == 200


def test_ndjson_bytes_and_load_unload(http):
    with http.stream("POST", "/api/chat", json={"model": "smollm2", "messages": MESSAGES,
                                                "options": {"num_predict": 8}}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        raw = r.read()
    lines = raw.split(b"\n")
    assert lines[-1] == b"" and all(lines[:-1])  # newline-terminated lines, no blank keep-alive lines
    objs = [json.loads(line) for line in lines[:-1]]
    assert all(o["model"] == "smollm2" and o["message"]["role"] == "assistant" for o in objs)
    assert [o["done"] for o in objs][-1] is True and objs[-1]["message"]["content"] == ""
    check_final(objs[-1], 8)
    assert "tps" in objs[-1] and "ttft" in objs[-1]
    load = http.post("/api/generate", json={"model": "smollm2"}).json()
    assert load["done"] is True and load["done_reason"] == "load" and load["response"] == ""
    unload = http.post("/api/chat", json={"model": "smollm2", "messages": [], "keep_alive": 0}).json()
    assert unload["done_reason"] == "unload"  # it is unloaded (tests/gateway/server/test_on_demand.py)
    assert http.post("/api/generate", json={"model": "smollm2"}).json()["done_reason"] == "load"  # as it was
    bad = http.post("/api/chat", content=b"{not json")
    assert bad.status_code == 400 and set(bad.json()) == {"error"}
    assert http.post("/api/generate", json={"model": "smollm2", "prompt": "x", "suffix": "y"}).status_code == 400


def test_lane_death_mid_stream_ends_with_an_error_line_and_concurrent_streams(own_server):
    import os
    import signal
    import threading
    import time

    srv = own_server("--model", "fake=synthetic:step_us=20000,n_ctx=1024", "--ctx-size", "1024",
                     "--keepalive-interval-s", "0.2", real_model=False)
    srv.wait_ready()
    with httpx.Client(base_url=srv.base_url, timeout=30) as http:
        # 4 concurrent chat streams on the one lane complete, each with its own lines
        results = [None] * 4

        def run(i):
            with http.stream("POST", "/api/chat", json={"model": "fake", "messages": MESSAGES,
                                                        "options": {"num_predict": 20}}) as r:
                results[i] = [json.loads(line) for line in r.iter_lines() if line]

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        for objs in results:
            assert objs[-1]["done"] is True and objs[-1]["eval_count"] == 20
            assert "".join(o["message"]["content"] for o in objs) == synthetic_text(20)
        pid = http.get("/health/ready").json()["models"]["fake"]["lanes"][0]["pid"]
        lines = []
        with http.stream("POST", "/api/generate", json={"model": "fake", "prompt": "x", "raw": True,
                                                        "options": {"num_predict": 1000}}) as r:
            for line in r.iter_lines():
                if not line:
                    continue
                lines.append(json.loads(line))
                if len(lines) == 3:
                    os.kill(pid, signal.SIGKILL)
                    t0 = time.monotonic()
        assert set(lines[-1]) == {"error"} and "lane_died" in lines[-1]["error"]
        assert time.monotonic() - t0 < 2
        assert all(o.get("done") is False for o in lines[:-1])


def test_cancel_by_id_and_stop_end_ollama_streams_with_an_error_line(own_server):
    import threading

    srv = own_server("--model", "fake=synthetic:step_us=20000,n_ctx=1024", "--ctx-size", "1024", real_model=False)
    srv.wait_ready()
    results = {}

    def run(name):
        with httpx.Client(base_url=srv.base_url, timeout=30) as http:
            with http.stream("POST", "/api/generate", headers={"X-Request-ID": name},
                             json={"model": "fake", "prompt": "x", "raw": True, "options": {"num_predict": 2000}}) as r:
                results[name] = [json.loads(line) for line in r.iter_lines() if line]

    threads = [threading.Thread(target=run, args=(f"req-{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    with httpx.Client(base_url=srv.base_url, timeout=30) as http:
        import time
        deadline = time.monotonic() + 10
        while http.get("/health/ready").json()["models"]["fake"]["slots_in_use"] < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert http.delete("/v1/requests/req-1").json() == {"id": "req-1", "cancelled": True}
        threads[1].join(5)
        assert set(results["req-1"][-1]) == {"error"} and "cancelled" in results["req-1"][-1]["error"]
        stopped = http.post("/stop", json={"model": "fake"}).json()
        assert sorted(stopped["cancelled"]) == ["req-0", "req-2"]
    for t in threads:
        t.join(5)
    assert all(set(results[n][-1]) == {"error"} for n in ("req-0", "req-2"))
    assert [r["outcome"] for r in srv.records("req-0", "req-1", "req-2")] == ["cancelled"] * 3


def test_gemma3_context_round_trip_keeps_one_bos(own_server):
    """Gemma 3 adds BOS: an earlier exchange's context begins with it, so the next prompt must not
    carry a second one in the middle."""
    srv = own_server("--model", "gemma3=gemma3")
    srv.wait_ready()
    client = ollama.Client(host=srv.base_url, timeout=60)
    options = {"num_predict": 4, "temperature": 0}
    first = client.generate(model="gemma3", prompt="My name is Ann.", options=options)
    follow = client.generate(model="gemma3", prompt="What is my name?", context=first.context, options=options)
    assert first.context[0] == 2 and follow.context.count(2) == 1
