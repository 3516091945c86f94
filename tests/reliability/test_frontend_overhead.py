"""§2.1 frontend overhead, model-free: 64 streams × 50 tokens/s on a synthetic lane against a
Sanic-only `/paced` baseline in the same run (benchmarks/frontend_bench.py: what is measured and
why — the spread of one emission step's deliveries over the streams); then the same streams
saturated. The precise figures are the benchmark's line; here the bounds are generous."""
from __future__ import annotations

import pytest

from gateway.cli.bench.metrics import percentile
from harness import benchmark_module

NUM_STREAMS = 64
INTERVAL_US = 20_000
MAX_ATTEMPTS = 3


@pytest.fixture(scope="module")
def paced_baseline():
    server = benchmark_module("frontend_bench").paced_server().start()
    yield server
    server.stop()


def test_frontend_adds_little_latency_and_loses_no_token(synthetic_factory, paced_baseline):
    """§2.1: no token lost, duplicated or reordered on any stream (paced or saturated: every
    stream's text is the lane's token sequence; run_streams asserts it on every attempt); the
    added latency's p50 ≤ 5 ms (target 1 ms) and its p99 ≤ 3× the Sanic-only baseline's + 10 ms
    (target 2×); the saturated relay moves ≥ 2 000 events/s (target 20 000 on 2 quiet cores).

    The CI box is shared, and one busy second on it moves a p99 by more than the margin: the
    latency bounds must hold in one of MAX_ATTEMPTS alternated measurements (a relay that is
    really slow fails every one), the precise figures are benchmarks/frontend_bench.py's line."""
    bench = benchmark_module("frontend_bench")
    srv = synthetic_factory("--model", f"fast=synthetic:step_us=0,slots={NUM_STREAMS}", "--max-queue", "0",
                            step_us=INTERVAL_US, slots=NUM_STREAMS)
    misses = []
    for _ in range(MAX_ATTEMPTS):
        m = bench.measure(srv.base_url, paced_baseline.base_url, NUM_STREAMS, 50, INTERVAL_US, runs=1,
                          saturated_tokens=200)
        laneserve, baseline = m["laneserve_s"], m["baseline_s"]
        assert len(laneserve) > NUM_STREAMS * 40 and len(baseline) > NUM_STREAMS * 40
        ls_p50, ls_p99, base_p99 = percentile(laneserve, 50), percentile(laneserve, 99), percentile(baseline, 99)
        if ls_p50 <= 0.005 and ls_p99 <= 3 * base_p99 + 0.010 and m["saturated_events_s"] >= 2000:
            return
        misses.append({"p50_s": ls_p50, "p99_s": ls_p99, "baseline_p99_s": base_p99,
                       "saturated_events_s": m["saturated_events_s"]})
    pytest.fail(f"latency bounds missed in all {MAX_ATTEMPTS} attempts: {misses}")
