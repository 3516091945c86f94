"""Serving smoke, the native code's whole path in one short test (.ci/sanitize runs it under
ASan+UBSan; the normal suite runs it too): one SmolLM2 lane, 8 concurrent streams of which one is
cancelled by its client mid-stream, then the lane SIGKILLed under load; every stream ends with its
terminal, the replacement lane serves the next request and the server shuts down cleanly."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import httpx
import pytest

from gateway.cli.bench.launcher import start_laneserve

READY_TIMEOUT_S = float(os.environ.get("LANESERVE_TEST_READY_TIMEOUT_S", "300"))  # ASan loads slower


@pytest.fixture
def server(tmp_path):
    try:
        from lanes import smollm2_path

        smollm2_path()
    except (ImportError, FileNotFoundError) as exc:
        pytest.skip(str(exc))
    srv = start_laneserve("--replicas", "1", "--threads", "1", "--ctx-size", "512", "--heartbeat-timeout-s", "60",
                          log_path=tmp_path / "server.log", cwd=tmp_path)
    srv.wait_ready(timeout_s=READY_TIMEOUT_S)
    yield srv
    code = srv.terminate()
    assert code == 0, srv.log_text()[-4000:]


def _body(max_tokens: int) -> dict:
    return {"model": "smollm2", "stream": True, "max_tokens": max_tokens, "temperature": 0.8, "seed": 1,
            "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse."}]}


async def _stream(client: httpx.AsyncClient, max_tokens: int, stop_after_events: int | None = None) -> list[str]:
    events = []
    async with client.stream("POST", "/v1/chat/completions", json=_body(max_tokens)) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                events.append(line[len("data: "):])
                if stop_after_events is not None and len(events) >= stop_after_events:
                    return events  # leaving the block closes the connection: the server cancels
    return events


def _ended_well(events: list[str]) -> bool:
    """[DONE] after a finish_reason, or after an error event (the lane died)."""
    if not events or events[-1] != "[DONE]":
        return False
    bodies = [json.loads(e) for e in events[:-1]]
    return "error" in bodies[-1] or any(b["choices"][0].get("finish_reason") for b in bodies if b.get("choices"))


def test_eight_streams_a_cancel_and_a_lane_kill(server):
    async def go():
        async with httpx.AsyncClient(base_url=server.base_url, timeout=600) as client:
            normal = [_stream(client, 24) for _ in range(7)]
            results = await asyncio.gather(*normal, _stream(client, 200, stop_after_events=3))
            for events in results[:7]:
                assert events[-1] == "[DONE]" and _ended_well(events)
            assert len(results[7]) == 3

            long = [asyncio.create_task(_stream(client, 400)) for _ in range(8)]
            await asyncio.sleep(2.0)
            ready = (await client.get("/health/ready")).json()
            lane_pid = ready["models"]["smollm2"]["lanes"][0]["pid"]
            os.kill(lane_pid, signal.SIGKILL)
            ended = await asyncio.gather(*long)
            for events in ended:
                assert _ended_well(events), events[-3:]
            assert any("error" in json.loads(e[-2]) for e in ended)  # the kill did land mid-stream

            deadline = time.monotonic() + READY_TIMEOUT_S
            while time.monotonic() < deadline:  # the pool restarts the lane
                r = await client.get("/health/ready")
                lanes = r.json()["models"]["smollm2"]["lanes"] if r.status_code == 200 else []
                if lanes and lanes[0]["pid"] != lane_pid:
                    break
                await asyncio.sleep(0.5)
            after = await _stream(client, 8)
            assert after[-1] == "[DONE]" and _ended_well(after)
    asyncio.run(go())
