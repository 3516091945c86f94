"""Models on demand, end to end: one server over a --models-dir holding SmolLM2 and Gemma 3
(symlinks to the installed files), a tiny model whose lanes cannot load (its training context is
below --ctx-size) and an unreadable file, with --models-max 1. Nothing is loaded at start; the
first request loads its model, a request for the other one waits while they swap; keep_alive 0,
POST /models/unload and --idle-unload-s unload (the lane process is gone); a model that cannot be
loaded fails alone, and is tried again by the next request."""
from __future__ import annotations

import concurrent.futures
import datetime
import os
import time

import httpx
import ollama
import pytest

from .. import thinking_gguf
from ..conftest import running_server, serving_stack_missing, start_server

CTX_SIZE = 2048  # above the tiny model's training context (1024): its lanes refuse to load


def _link_real_models(directory) -> None:
    from lanes.model_files import gemma3_path, smollm2_path

    os.symlink(smollm2_path(), directory / "smollm2.gguf")
    os.symlink(gemma3_path(), directory / "gemma3.gguf")


@pytest.fixture(scope="module")
def dir_server(tmp_path_factory):
    reason = serving_stack_missing()
    if reason:
        pytest.skip(reason)
    try:
        from lanes.model_files import gemma3_path

        gemma3_path()
    except (FileNotFoundError, ValueError) as exc:
        pytest.skip(str(exc))
    tmp = tmp_path_factory.mktemp("on_demand")
    models = tmp / "models"
    models.mkdir()
    _link_real_models(models)
    thinking_gguf.write_thinking_gguf(models / "tiny.gguf")
    (models / "broken.gguf").write_bytes(b"GGUF" + b"\xff" * 64)
    (models / "notes.txt").write_text("not a model")
    with running_server(tmp, "--models-dir", str(models), "--models-max", "1", "--ctx-size", str(CTX_SIZE),
                        "--parallel", "4", "--queue-timeout-s", "60") as srv:
        yield srv


@pytest.fixture
def client(dir_server):
    with httpx.Client(base_url=dir_server.base_url, timeout=60.0) as c:
        yield c


def _statuses(client) -> dict:
    return {m["id"]: m["status"] for m in client.get("/models").json()["data"]}


def _lane_pids(client, model: str) -> list[int]:
    lanes = client.get("/health/ready").json()["models"][model]["lanes"]
    return [lane["pid"] for lane in lanes if lane["pid"]]



def _complete(base_url: str, model: str) -> httpx.Response:
    return httpx.post(base_url + "/v1/completions", json={"model": model, "prompt": "Hello", "max_tokens": 4},
                      timeout=90.0)


def _wait_unloaded(client, model: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _statuses(client)[model]["value"] != "unloaded":
        assert time.monotonic() < deadline, f"{model} still {_statuses(client)[model]}"
        time.sleep(0.05)


def test_registered_by_file_stem_and_none_loaded_at_start(client):
    statuses = _statuses(client)
    assert set(statuses) == {"smollm2", "gemma3", "tiny", "broken"}  # notes.txt is no model
    assert {m: s["value"] for m, s in statuses.items()} == dict.fromkeys(statuses, "unloaded")
    assert statuses["broken"]["failed"] is True and "GGUF" in statuses["broken"]["error"]
    assert client.get("/health/ready").status_code == 200  # an unloaded model is no outage
    cards = {m["id"]: m["status"]["value"] for m in client.get("/v1/models").json()["data"]}
    assert cards == {"smollm2": "unloaded", "gemma3": "unloaded", "tiny": "unloaded"}
    tags = {m["name"]: m["loaded"] for m in client.get("/api/tags").json()["models"]}
    assert tags == {"smollm2": False, "gemma3": False, "tiny": False}


def test_alternating_concurrent_requests_each_wait_for_the_swap(dir_server, client):
    models = ["smollm2", "gemma3"] * 4
    with concurrent.futures.ThreadPoolExecutor(len(models)) as pool:
        answers = list(pool.map(lambda m: _complete(dir_server.base_url, m), models))
    assert [a.status_code for a in answers] == [200] * len(models), [a.text for a in answers if a.status_code != 200]
    assert [a.json()["model"] for a in answers] == models
    loaded = [m for m, s in _statuses(client).items() if s["value"] == "loaded"]
    assert len(loaded) == 1  # --models-max 1
    # one after the other too: every request for the other model swaps them
    for model in ["gemma3", "smollm2", "gemma3"]:
        assert _complete(dir_server.base_url, model).status_code == 200
        assert [m for m, s in _statuses(client).items() if s["value"] == "loaded"] == [model]


def test_router_load_and_unload_and_api_ps(dir_server, client):
    assert client.post("/models/load", json={"model": "gemma3"}).json() == {"success": True}
    assert [m for m, s in _statuses(client).items() if s["value"] == "loaded"] == ["gemma3"]
    running = ollama.Client(host=dir_server.base_url, timeout=60).ps()
    assert [m.model for m in running.models] == ["gemma3"]
    entry = running.models[0]
    assert entry.size > 50 << 20 and entry.size_vram == 0  # the lane's resident memory, all in RAM
    expires_in_s = (entry.expires_at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    assert 240 < expires_in_s <= 301  # the default --idle-unload-s 300
    pids = _lane_pids(client, "gemma3")
    assert client.post("/models/unload", json={"model": "gemma3"}).json() == {"success": True}
    assert _statuses(client)["gemma3"]["value"] == "unloaded"
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
    assert ollama.Client(host=dir_server.base_url, timeout=60).ps().models == []
    assert client.post("/models/load", json={"model": "nope"}).status_code == 404
    assert client.post("/models/load", json={}).status_code == 400


def test_ollama_keep_alive_0_unloads_after_the_request(dir_server, client):
    api = ollama.Client(host=dir_server.base_url, timeout=60)
    answer = api.generate(model="smollm2", prompt="Hi", options={"num_predict": 3}, keep_alive=0)
    assert answer.done
    _wait_unloaded(client, "smollm2")
    # the load call: no prompt loads (and a negative keep_alive keeps it), keep_alive 0 unloads
    assert api.generate(model="smollm2", keep_alive="-1m").done_reason == "load"
    assert _statuses(client)["smollm2"]["value"] == "loaded"
    assert client.get("/health/ready").json()["models"]["smollm2"]["residency"]["expires_in_s"] is None
    pids = _lane_pids(client, "smollm2")
    assert api.generate(model="smollm2", keep_alive=0).done_reason == "unload"
    assert _statuses(client)["smollm2"]["value"] == "unloaded"
    assert pids and not any(os.path.exists(f"/proc/{pid}") for pid in pids)


def test_an_unreadable_file_fails_for_that_model_only(dir_server, client):
    answer = client.post("/v1/chat/completions", json={"model": "broken", "messages": [{"role": "user", "content": "x"}]})
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "model_load_failed"
    assert "could not be loaded" in answer.json()["error"]["message"] and "GGUF" in answer.json()["error"]["message"]
    ollama_answer = client.post("/api/chat", json={"model": "broken", "messages": [{"role": "user", "content": "x"}]})
    assert ollama_answer.status_code == 503 and "could not be loaded" in ollama_answer.json()["error"]
    assert _complete(dir_server.base_url, "smollm2").status_code == 200


def test_a_model_whose_lanes_cannot_load_fails_its_requests_and_is_retried_by_the_next(dir_server, client):
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda m: _complete(dir_server.base_url, m), ["tiny", "tiny", "tiny"]))
    assert [a.status_code for a in answers] == [503] * 3
    for answer in answers:
        assert answer.json()["error"]["code"] == "model_load_failed"
        assert "training context" in answer.json()["error"]["message"]
    status = _statuses(client)["tiny"]
    assert status["value"] == "unloaded" and status["failed"] and "training context" in status["error"]
    loads_before = dir_server.log_text().count("model tiny could not be loaded")
    assert _complete(dir_server.base_url, "tiny").status_code == 503  # tried again, not answered from memory
    assert dir_server.log_text().count("model tiny could not be loaded") == loads_before + 1
    assert _complete(dir_server.base_url, "gemma3").status_code == 200


def test_idle_models_unload_after_idle_unload_s(tmp_path):
    reason = serving_stack_missing()
    if reason:
        pytest.skip(reason)
    models = tmp_path / "models"
    models.mkdir()
    from lanes.model_files import smollm2_path

    os.symlink(smollm2_path(), models / "smollm2.gguf")
    srv = start_server(tmp_path, "--models-dir", str(models), "--idle-unload-s", "1")
    try:
        srv.wait_ready()
        with httpx.Client(base_url=srv.base_url, timeout=60.0) as client:
            t0 = time.monotonic()
            first = client.post("/v1/completions", json={"model": "smollm2", "prompt": "Hi", "max_tokens": 2,
                                                         "stream": True})
            assert first.status_code == 200
            cold_s = time.monotonic() - t0
            pids = _lane_pids(client, "smollm2")
            assert pids and _statuses(client)["smollm2"]["value"] == "loaded"
            _wait_unloaded(client, "smollm2", timeout_s=8.0)
            assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
            assert client.post("/v1/completions", json={"model": "smollm2", "prompt": "Hi",
                                                        "max_tokens": 2}).status_code == 200
        print(f"cold request (load + 2 tokens): {cold_s:.2f} s")
        assert cold_s < 10.0
    finally:
        assert srv.terminate() == 0, srv.log_text()[-4000:]
