"""R24 soak, short form: benchmarks/soak.py's load (OpenAI and Ollama, streamed and not, 5%
client cancels, a lane SIGKILL) for ~4 s on synthetic lanes. The long form is
`python benchmarks/soak.py 30` on SmolLM2."""
from __future__ import annotations

import asyncio

from harness import benchmark_module


def test_short_soak_has_no_errors_beyond_induced_and_leaks_nothing(synthetic_factory):
    """R24 (short): no errors beyond those induced by the lane kill, the lane kill recovered, and
    the gateway's fds, threads and /dev/shm names back to their idle counts."""
    soak = benchmark_module("soak")
    srv = synthetic_factory("--replicas", "2", step_us=5000, slots=4)
    result = asyncio.run(soak.soak(srv.base_url, srv.pid, minutes=0.06, kill_every_s=2.0, concurrency=4,
                                   model="m", probe_s=0.5, settle_s=0.5))
    assert result["errors"] == 0, result
    assert result["total"] > 20 and result["kills"] >= 1 and result["restarts"] >= result["kills"], result
    assert result["shm"][1] == result["shm"][0], result
    assert result["fds"][1] <= result["fds"][0] + 4 and result["threads"][1] <= result["threads"][0] + 8, result
