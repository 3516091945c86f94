"""Issue 26's server check, through a real SmolLM2 server: 32 conversations × 4 turns, each with its
own 400–800-token system prompt, 8 at a time on 8 slots (benchmarks/multiturn_bench.py's load:
every conversation's slot has gone to others by its next turn). Every turn 2–4 reports at least the
previous turn's whole prompt as cached (usage.prompt_tokens_details.cached_tokens), and the lane's
memory stays within its K/V budget: anonymous resident memory (the K/V pool and activations; the
weights are file mappings) ≤ the pool's bytes + a fixed allowance for the interpreter and buffers."""
from __future__ import annotations

import asyncio

import httpx

from harness import benchmark_module

CONVERSATIONS, TURNS = 32, 4
CACHE_RAM_MIB = 1024  # holds every conversation (32 × ≤ 900 tokens × 22.5 KiB)
ALLOWANCE_BYTES = 256 << 20  # Python, the tokenizer, activation and logits buffers, rings


def rss_anon_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no RssAnon for pid {pid}")


def test_every_later_turn_finds_its_previous_prompt_cached_within_the_budget(smollm2_factory):
    bench = benchmark_module("multiturn_bench")
    srv = smollm2_factory("--threads", "2", "--parallel", "8", "--ctx-size", "2048",
                          "--cache-ram-mib", str(CACHE_RAM_MIB))
    result = asyncio.run(bench.run_load(srv.base_url, "smollm2", CONVERSATIONS, TURNS, 8, 8))
    by_turn = {(c, t): (prompt, cached) for c, t, prompt, cached in result["turn_usage"]}
    assert len(by_turn) == CONVERSATIONS * TURNS
    assert all(400 <= by_turn[c, 0][0] - 20 <= 800 for c in range(CONVERSATIONS)), by_turn  # + template, question
    short = [(c, t, by_turn[c, t - 1][0], by_turn[c, t][1]) for c in range(CONVERSATIONS) for t in range(1, TURNS)
             if by_turn[c, t][1] < by_turn[c, t - 1][0]]
    assert not short, f"(conversation, turn, previous prompt, cached) below the previous prompt: {short}"

    ready = httpx.get(srv.base_url + "/health/ready", timeout=10).json()["models"]["smollm2"]
    (lane,) = ready["lanes"]
    budget_bytes = lane["kv_cache_bytes"] + (CACHE_RAM_MIB << 20)
    assert rss_anon_bytes(lane["pid"]) <= budget_bytes + ALLOWANCE_BYTES, (rss_anon_bytes(lane["pid"]), budget_bytes)
    assert ready["prompt_cache"]["kv_pages_free"] <= ready["prompt_cache"]["kv_pages"]
