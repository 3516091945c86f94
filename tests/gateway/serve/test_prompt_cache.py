"""--cache-ram-mib through the server and the openai client: with more conversations than slots,
a conversation's next turn reports the prefix it kept as usage.prompt_tokens_details.cached_tokens,
and answers as it would without the cache; the lanes' prompt cache figures (STATS records) reach
/metrics, /health/ready and `laneserve ps`."""
from __future__ import annotations

from gateway.cli.ps import render

from .cache_figures import settled_figures

PERSONAS = ["a ship's navigator", "a baker in Lyon", "a retired astronomer"]
RULES = "Speak plainly, never use lists and keep every answer to one sentence. " * 8


def _turns(client, cache_seed: int) -> list:
    """Three conversations on two slots, then the first one's second turn: its usage."""
    histories = [[{"role": "system", "content": f"You are {p}. {RULES}"},
                  {"role": "user", "content": "Where are you?"}] for p in PERSONAS]
    first_usage = []
    for history in histories:
        r = client.chat.completions.create(model="smollm2", messages=history, max_tokens=8, temperature=0)
        history.append({"role": "assistant", "content": r.choices[0].message.content})
        first_usage.append(r.usage)
    history = histories[0] + [{"role": "user", "content": "And why?"}]
    r = client.chat.completions.create(model="smollm2", messages=history, max_tokens=12, temperature=0.8,
                                       seed=cache_seed)
    return first_usage, r


def _run(own_server, cache_mib: str):
    from openai import OpenAI

    srv = own_server("--parallel", "2", "--cache-ram-mib", cache_mib)
    srv.wait_ready()
    with OpenAI(base_url=srv.base_url + "/v1", api_key="unused", max_retries=0, timeout=60.0) as client:
        first_usage, second = _turns(client, cache_seed=77)
    return first_usage, second, srv.base_url


def test_a_displaced_conversation_keeps_its_prefill(own_server):
    first_usage, second, base_url = _run(own_server, "64")
    assert second.usage.prompt_tokens > first_usage[0].prompt_tokens > 120
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first_usage[0].prompt_tokens, second.usage
    samples, ready = settled_figures(base_url, lambda s: s.get("laneserve_prompt_cache_hit_tokens_total", 0) >= cached)
    # The cache's figures, summed over the model's (one) lane.
    assert samples["laneserve_prompt_cache_budget_bytes"] == 64 << 20, samples
    assert samples["laneserve_prompt_cache_entries"] >= 1, samples
    assert 0 < samples["laneserve_prompt_cache_bytes"] <= 64 << 20, samples
    assert samples["laneserve_prompt_cache_hits_total"] >= 1, samples
    assert samples["laneserve_prompt_cache_hit_tokens_total"] >= cached, samples
    assert samples["laneserve_prompt_cache_stores_total"] >= samples["laneserve_prompt_cache_entries"], samples
    assert samples["laneserve_prompt_cache_evictions_total"] == 0, samples  # 64 MiB holds them all
    info = ready["models"]["smollm2"]["prompt_cache"]
    assert info == {"bytes": samples["laneserve_prompt_cache_bytes"], "budget_bytes": 64 << 20,
                    "entries": samples["laneserve_prompt_cache_entries"],
                    "hits": samples["laneserve_prompt_cache_hits_total"],
                    "hit_tokens": samples["laneserve_prompt_cache_hit_tokens_total"], "evictions": 0,
                    "kv_pages": samples["laneserve_kv_pages"], "kv_pages_free": samples["laneserve_kv_pages_free"],
                    "kv_window_pages": 0, "kv_window_pages_free": 0,  # SmolLM2 has no sliding-window layers
                    "disk_reads": 0, "disk_writes": 0, "disk_bytes": 0, "disk_budget_bytes": 0}
    assert 0 < samples["laneserve_kv_pages_free"] < samples["laneserve_kv_pages"], samples
    table = render(ready, {}).split("\n\n")[-1].splitlines()
    assert table[0].split()[:3] == ["MODEL", "PROMPT", "CACHE"]
    row = table[1].split()
    assert row[0] == "smollm2" and row[3:6] == ["/", "64.0", "MiB"]
    assert row[-4:] == [str(info["entries"]), str(info["hits"]), str(info["hit_tokens"]), "0"]

    first_off, second_off, base_url_off = _run(own_server, "0")
    samples_off, ready_off = settled_figures(base_url_off, lambda s: "laneserve_prompt_cache_budget_bytes" in s)
    assert second_off.usage.prompt_tokens_details.cached_tokens < 16  # the template's opening at most
    assert second_off.choices[0].message.content == second.choices[0].message.content  # same tokens, seeded
    assert samples_off["laneserve_prompt_cache_budget_bytes"] == 0, samples_off
    assert samples_off["laneserve_prompt_cache_hit_tokens_total"] == 0, samples_off
    assert "PROMPT CACHE" not in render(ready_off, {})
