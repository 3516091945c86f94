"""--prefix-cache-dir through a real server and the openai client: a server restarted with the same
model and directory reports a known prompt's prefix as cached (read back from disk) and answers as
before; llama-server's POST /slots/{id}?action=save|restore|erase with its bodies and error shape
(400 for a bad action, slot or file name, 501 without --prefix-cache-dir)."""
from __future__ import annotations

import httpx

from .cache_figures import settled_figures

SYSTEM = "You are a lighthouse keeper. " + "".join(
    f"Rule {i}: answer plainly, name the place and keep it short. " for i in range(22))
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Where are you?"}]


def _chat(srv):
    from openai import OpenAI

    with OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0, timeout=120.0) as client:
        return client.chat.completions.create(model="smollm2", messages=MESSAGES, max_tokens=12, temperature=0)


def _slots(srv, slot, action, body=None):
    return httpx.post(f"{srv.base_url}/slots/{slot}", params={"action": action}, json=body, timeout=60)


def test_a_restarted_server_serves_a_known_prompt_from_disk(own_server, tmp_path):
    cache = tmp_path / "prefix-cache"
    cache.mkdir()
    first = own_server("--prefix-cache-dir", str(cache), "--parallel", "2")
    first.wait_ready()
    before = _chat(first)
    assert before.usage.prompt_tokens > 256
    assert first.terminate() == 0, first.log_text()[-3000:]
    assert len(list(cache.glob("*.lskv"))) >= before.usage.prompt_tokens // 64

    second = own_server("--prefix-cache-dir", str(cache), "--parallel", "2")
    second.wait_ready()
    after = _chat(second)
    whole_pages = before.usage.prompt_tokens // 64 * 64
    assert after.usage.prompt_tokens_details.cached_tokens >= min(whole_pages, before.usage.prompt_tokens - 1) - 64
    assert after.usage.prompt_tokens_details.cached_tokens >= 256
    assert after.choices[0].message.content == before.choices[0].message.content
    samples, ready = settled_figures(second.base_url, lambda s: s.get("laneserve_prompt_cache_disk_reads_total", 0) >= 4)
    assert samples["laneserve_prompt_cache_disk_reads_total"] >= 4, samples  # the 256 cached tokens came from disk
    assert 0 < samples["laneserve_prompt_cache_disk_bytes"] <= samples["laneserve_prompt_cache_disk_budget_bytes"]
    assert samples["laneserve_prompt_cache_disk_budget_bytes"] <= 4096 << 20, samples
    assert ready["models"]["smollm2"]["prompt_cache"]["disk_reads"] == samples["laneserve_prompt_cache_disk_reads_total"]

    saved = _slots(second, 0, "save", {"filename": "conv.bin"})
    assert saved.status_code == 200, saved.text
    body = saved.json()
    assert body["id_slot"] == 0 and body["filename"] == "conv.bin" and body["n_saved"] >= 256
    assert body["n_written"] > 0 and body["timings"]["save_ms"] >= 0 and (cache / "conv.bin").is_file()
    restored = _slots(second, 1, "restore", {"filename": "conv.bin"}).json()
    assert restored["n_restored"] == body["n_saved"] and restored["n_read"] == body["n_written"]
    assert set(restored) == {"id_slot", "filename", "n_restored", "n_read", "timings"}
    assert _slots(second, 1, "erase").json() == {"id_slot": 1, "n_erased": body["n_saved"]}

    for bad in ("../conv.bin", "a/b.bin", "", "..", "a\u0000b", "dir\\x.bin"):
        r = _slots(second, 0, "save", {"filename": bad})
        assert r.status_code == 400, bad
        assert r.json()["error"]["code"] == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert _slots(second, 0, "save").status_code == 400  # no filename
    assert _slots(second, 0, "load", {"filename": "conv.bin"}).status_code == 400
    assert _slots(second, 2, "save", {"filename": "x.bin"}).status_code == 400  # 1 lane x 2 slots
    missing = _slots(second, 0, "restore", {"filename": "absent.bin"})
    assert missing.status_code == 400 and "no such file" in missing.json()["error"]["message"]


def test_slot_routes_need_a_prefix_cache_dir(synthetic_server):
    r = httpx.post(f"{synthetic_server.base_url}/slots/0", params={"action": "save"}, json={"filename": "a.bin"},
                   timeout=10)
    assert r.status_code == 501
    assert r.json()["error"]["type"] == "not_supported_error" and "--prefix-cache-dir" in r.json()["error"]["message"]


def test_an_unusable_prefix_cache_dir_stops_the_start(own_server, tmp_path):
    srv = own_server("--prefix-cache-dir", str(tmp_path / "absent"))
    assert srv.proc.wait(timeout=60) != 0
    assert "prefix_cache_dir" in srv.log_text()

