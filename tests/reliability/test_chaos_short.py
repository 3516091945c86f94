"""Chaos, short form: benchmarks/chaos.py for one minute on SmolLM2 — 32 clients mixing every
protocol and feature, disconnects and cancels by id, one lane SIGKILL, one burst beyond the
queue and one lane SIGSTOP. The long form is `python benchmarks/chaos.py 30`."""
from __future__ import annotations

import asyncio

from harness import benchmark_module


def test_one_minute_of_chaos_ends_every_request_well_and_recovers_every_fault(smollm2_factory):
    chaos = benchmark_module("chaos")
    srv = smollm2_factory(*chaos.SERVE_ARGS)
    result = asyncio.run(chaos.chaos(srv.base_url, srv.pid, minutes=1.0))
    print(result["line"])
    assert result["violations"] == [], result["line"]
    assert result["injected"] == 2 and result["recovered"] == 2, result["faults"]
    assert result["mismatches"] == 0 and result["replayed"] >= 10, result["line"]
    assert result["outcomes"].get("ok", 0) > 100 and result["outcomes"].get("refused", 0) > 0, result["outcomes"]
    assert result["shm"][1] == result["shm"][0] and result["fds"][1] <= result["fds"][0], result["line"]
