"""LoRA adapters over HTTP on a real SmolLM2 server, under each API's name for them: vLLM's
`model: NAME` (OpenAI, Ollama, Responses, Messages) and load/unload routes, llama-server's
/lora-adapters and per-request `lora`, SiMa's /set_lora and /unset_lora; --lora-dir as the only
place run-time loads read from; a mixed batch identical to each request alone."""
from __future__ import annotations

import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from ..conftest import serving_stack_missing, start_server

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "csrc" / "model"))
from lora_gguf import ATTENTION, AdapterSpec, Q, cached_adapter  # noqa: E402

pytestmark = pytest.mark.real_model
PIRATE = AdapterSpec(rank=16, a_type=Q.F16, b_type=Q.F16, seed=41)
CALM = AdapterSpec(rank=8, targets=ATTENTION, rel_norm=0.15, seed=42)
USER = [{"role": "user", "content": "Tell me about the sea."}]
GREEDY = {"temperature": 0, "max_tokens": 16}


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory):
    reason = serving_stack_missing()
    if reason:
        pytest.skip(reason)
    from lanes import smollm2_path

    tmp = tmp_path_factory.mktemp("lora")
    lora_dir = tmp / "adapters"
    lora_dir.mkdir()
    base = Path(smollm2_path())
    shutil.copy(cached_adapter(base, PIRATE), lora_dir / "pirate.gguf")
    shutil.copy(cached_adapter(base, CALM), lora_dir / "calm.gguf")
    srv = start_server(tmp, "--model", "smollm2", "--lora", f"pirate={lora_dir / 'pirate.gguf'}",
                       "--lora-dir", str(lora_dir), "--parallel", "8")
    srv.wait_ready()
    yield srv
    assert srv.terminate() == 0, srv.log_text()[-4000:]


@pytest.fixture
def http(lora_server):
    with httpx.Client(base_url=lora_server.base_url, timeout=120) as c:
        yield c


def chat(http, model: str, **extra) -> str:
    r = http.post("/v1/chat/completions", json={"model": model, "messages": USER, **GREEDY, **extra})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def adapter_ids(http) -> dict[str, int]:
    return {a["name"]: a["id"] for a in http.get("/lora-adapters").json()}


def test_adapter_is_a_model_on_every_protocol(lora_server, http):
    cards = {c["id"]: c for c in http.get("/v1/models").json()["data"]}
    assert cards["pirate"]["parent"] == "smollm2" and cards["smollm2"]["parent"] is None
    base, pirate = chat(http, "smollm2"), chat(http, "pirate")
    assert pirate != base and chat(http, "pirate") == pirate
    client = openai.OpenAI(base_url=lora_server.base_url + "/v1", api_key="x", max_retries=0)
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="pirate", messages=USER, stream=True, **GREEDY) if c.choices)
    assert streamed == pirate
    responses = client.responses.create(model="pirate", input=USER[0]["content"], temperature=0, max_output_tokens=16)
    assert responses.output_text == pirate
    messages = http.post("/v1/messages", json={"model": "pirate", "messages": USER, "max_tokens": 16,
                                               "temperature": 0}).json()
    assert messages["content"][0]["text"] == pirate
    ollama = http.post("/api/chat", json={"model": "pirate:latest", "messages": USER, "stream": False,
                                          "options": {"temperature": 0, "num_predict": 16, "repeat_penalty": 1.0}}).json()
    assert ollama["message"]["content"] == pirate and ollama["model"] == "pirate:latest"  # echoed as Ollama does


def test_llama_server_scales_and_per_request_lora(http):
    base, pirate = chat(http, "smollm2"), chat(http, "pirate")
    ids = adapter_ids(http)
    assert chat(http, "smollm2", lora=[{"id": ids["pirate"], "scale": 1.0}]) == pirate
    assert chat(http, "smollm2", lora=[{"id": ids["pirate"], "scale": 0}]) == base
    assert http.post("/lora-adapters", json=[{"id": ids["pirate"], "scale": 1.0}]).json() == {"success": True}
    try:
        assert [a["scale"] for a in http.get("/lora-adapters").json() if a["name"] == "pirate"] == [1.0]
        assert chat(http, "smollm2") == pirate
    finally:
        http.post("/lora-adapters", json=[])
    assert chat(http, "smollm2") == base
    bad = http.post("/v1/chat/completions", json={"model": "smollm2", "messages": USER, "lora": [{"id": 999}]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "lora"


def test_vllm_load_and_unload_at_run_time(http):
    assert http.post("/v1/chat/completions", json={"model": "calm", "messages": USER}).status_code == 404
    r = http.post("/v1/load_lora_adapter", json={"lora_name": "calm", "lora_path": "calm.gguf"})
    assert r.status_code == 200 and "calm" in r.text
    calm = chat(http, "calm")
    assert calm != chat(http, "smollm2") and calm != chat(http, "pirate")
    assert http.post("/v1/load_lora_adapter", json={"lora_name": "calm", "lora_path": "calm.gguf"}).status_code == 400
    assert http.post("/v1/unload_lora_adapter", json={"lora_name": "calm"}).status_code == 200
    assert http.post("/v1/chat/completions", json={"model": "calm", "messages": USER}).status_code == 404
    assert http.post("/v1/unload_lora_adapter", json={"lora_name": "calm"}).status_code == 404


@pytest.mark.parametrize("body, status, param", [
    ({"lora_name": "x", "lora_path": "../pirate.gguf"}, 400, "lora_path"),
    ({"lora_name": "x", "lora_path": "/etc/passwd"}, 400, "lora_path"),
    ({"lora_name": "x", "lora_path": "missing.gguf"}, 404, "lora_path"),
    ({"lora_name": "a/b", "lora_path": "calm.gguf"}, 400, "lora_name"),
    ({"lora_name": "..", "lora_path": "calm.gguf"}, 400, "lora_name"),
    ({"lora_name": "smollm2", "lora_path": "calm.gguf"}, 400, "lora_name"),
    ({"lora_name": "x"}, 400, "lora_path"),
])
def test_run_time_loads_read_only_inside_the_lora_dir(http, body, status, param):
    r = http.post("/v1/load_lora_adapter", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["param"] == param


def test_sima_set_and_unset_lora(http):
    base = chat(http, "smollm2")
    for bad in ("../calm", "a/b", "", "x\x00y"):
        assert http.post("/set_lora", json={"model": "smollm2", "name": bad}).status_code == 400
    assert http.post("/set_lora", json={"model": "smollm2", "name": "nosuch"}).status_code == 404
    assert http.post("/set_lora", json={"name": "pirate"}).json()["lora"] == "pirate"  # one text model: model optional
    try:
        assert chat(http, "smollm2") == chat(http, "pirate")
    finally:
        assert http.post("/unset_lora", json={"model": "smollm2"}).json()["lora"] is None
    assert chat(http, "smollm2") == base
    assert http.post("/set_lora", json={"model": "smollm2", "name": "calm"}).status_code == 200  # loaded from the dir
    try:
        assert chat(http, "smollm2") == chat(http, "calm")
    finally:
        http.post("/unset_lora")
        http.post("/v1/unload_lora_adapter", json={"lora_name": "calm"})


def test_mixed_adapters_in_one_batch_are_identical_to_alone(http):
    seeded = {"temperature": 0.8, "seed": 7, "max_tokens": 24}
    models = ["pirate", "smollm2"] * 4
    alone = {m: chat(http, m, **seeded) for m in set(models)}
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda m: chat(http, m, **seeded), models))
    assert together == [alone[m] for m in models]


def test_records_and_readiness_show_adapters(lora_server, http):
    r = http.post("/v1/chat/completions", headers={"X-Request-ID": "lora-record"},
                  json={"model": "pirate", "messages": USER, "max_tokens": 2})
    assert r.status_code == 200
    [record] = lora_server.records("lora-record")
    assert record["model"] == "smollm2" and record["lora"] == [[adapter_ids(http)["pirate"], 1.0]]
    ready = http.get("/health/ready").json()["models"]["smollm2"]
    assert {a["name"] for a in ready["lora"]} >= {"pirate"} and ready["lora_errors"] == {}


def _requests_total(http, **labels) -> float:
    from prometheus_client.parser import text_string_to_metric_families
    return sum(s.value for f in text_string_to_metric_families(http.get("/metrics").text) for s in f.samples
               if s.name == "laneserve_requests_total" and all(s.labels.get(k) == v for k, v in labels.items()))


def test_metrics_and_ps_show_adapters(lora_server, http, capsys):
    from gateway.cli.main import main
    before = {a: _requests_total(http, model="smollm2", adapter=a, outcome="success") for a in ("pirate", "")}
    chat(http, "pirate")
    chat(http, "pirate")
    chat(http, "smollm2")
    after = {a: _requests_total(http, model="smollm2", adapter=a, outcome="success") for a in ("pirate", "")}
    assert after["pirate"] - before["pirate"] == 2 and after[""] - before[""] == 1
    assert main(["ps", "--url", lora_server.base_url]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["smollm2", "pirate", str(adapter_ids(http)["pirate"]), "loaded"] in rows
