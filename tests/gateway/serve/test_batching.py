"""Many requests per lane, through a real server with the real SmolLM2: concurrent streams share one
lane, seeded output does not depend on batchmates, cancel frees a slot, prefix reuse is reported,
the queue admits up to slots + max_queue then 429, a queued disconnect never reaches the lane,
a lane SIGKILL ends every in-flight stream at once, a long prompt does not stall running streams."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import httpx
import pytest

pytestmark = pytest.mark.real_model

PROMPT = "Once upon a time, in a quiet village by the sea, there lived"


def body(i: int, max_tokens: int = 32, **extra) -> dict:
    return {"model": "smollm2", "prompt": f"{PROMPT} {i}", "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}, **extra}


def plain(i: int, max_tokens: int = 32) -> dict:
    return {"model": "smollm2", "prompt": f"{PROMPT} {i}", "max_tokens": max_tokens, "ignore_eos": True}


async def stream_completion(client: httpx.AsyncClient, payload: dict, on_chunk=None) -> dict:
    """→ {text, usage, finish, error, chunk_times}"""
    out = {"text": "", "usage": None, "finish": None, "error": None, "times": []}
    async with client.stream("POST", "/v1/completions", json=payload) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[len("data: "):])
            if "error" in event:
                out["error"] = event["error"]
                continue
            if event.get("usage"):
                out["usage"] = event["usage"]
            for choice in event["choices"]:
                if choice["text"]:
                    out["text"] += choice["text"]
                    out["times"].append(time.monotonic())
                    if on_chunk is not None:
                        on_chunk()
                if choice["finish_reason"]:
                    out["finish"] = choice["finish_reason"]
    return out


@pytest.fixture
def server8(own_server):
    srv = own_server("--parallel", "8", "--max-batch-tokens", "128", "--threads", "2", "--ctx-size", "4096",
                     "--heartbeat-timeout-s", "30")
    srv.wait_ready()
    return srv


def ready(srv) -> dict:
    return httpx.get(srv.base_url + "/health/ready").json()["models"]["smollm2"]


async def test_eight_streams_share_one_lane_and_seeded_text_ignores_batchmates(server8):
    async with httpx.AsyncClient(base_url=server8.base_url, timeout=120) as c:
        seeded = dict(temperature=0.8, seed=4242)
        alone = await stream_completion(c, body(3, **seeded))
        for order in (range(8), reversed(range(8))):
            results = await asyncio.gather(*[
                stream_completion(c, body(i, **(seeded if i == 3 else dict(temperature=0.8, seed=i))))
                for i in order])
            by_prompt = dict(zip(order, results)) if isinstance(order, range) else dict(zip(range(7, -1, -1), results))
            for r in results:
                assert r["error"] is None and r["finish"] == "length"
                assert r["usage"]["completion_tokens"] == 32 and r["usage"]["prompt_tokens"] > 10
                assert r["text"]
            assert by_prompt[3]["text"] == alone["text"]
    lane = ready(server8)["lanes"][0]
    assert ready(server8)["slots"] == 8 and lane["kv_cache_bytes"] > 0 and lane["restarts"] == 0


async def test_one_of_eight_cancelled_others_unaffected_and_slot_reused(server8):
    async with httpx.AsyncClient(base_url=server8.base_url, timeout=120) as c:
        async def cancelled():
            seen = 0
            async with c.stream("POST", "/v1/completions", json=body(99, max_tokens=400)) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        seen += 1
                        if seen >= 3:
                            return  # closes the connection mid-stream
        results = await asyncio.gather(cancelled(), *[stream_completion(c, body(i, max_tokens=40)) for i in range(7)])
        for r in results[1:]:
            assert r["error"] is None and r["usage"]["completion_tokens"] == 40
        deadline = time.monotonic() + 5
        while ready(server8)["slots_in_use"] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert ready(server8)["slots_in_use"] == 0
        again = await asyncio.gather(*[stream_completion(c, body(i, max_tokens=8)) for i in range(8)])
        assert all(r["usage"]["completion_tokens"] == 8 for r in again)
    records = [json.loads(line) for line in server8.records_path.read_text().splitlines()]
    assert sum(1 for r in records if r["outcome"] == "disconnect") == 1


async def test_prefix_reuse_is_reported_as_cached_tokens(server8):
    system = "You are a meticulous assistant. Answer in one short sentence and never use lists. " * 6
    async with httpx.AsyncClient(base_url=server8.base_url, timeout=120) as c:
        payloads = [{"model": "smollm2", "max_tokens": 4, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": q}]}
            for q in ("Name a fruit.", "Name a colour.")]
        first = (await c.post("/v1/chat/completions", json=payloads[0])).json()
        second = (await c.post("/v1/chat/completions", json=payloads[1])).json()
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] < 20
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 100 < cached < second["usage"]["prompt_tokens"]


async def test_queue_then_429_only_beyond_slots_plus_queue(own_server):
    srv = own_server("--parallel", "2", "--max-queue", "2", "--threads", "2")
    srv.wait_ready()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=120) as c:
        long = [asyncio.ensure_future(stream_completion(c, body(i, max_tokens=60))) for i in range(4)]
        deadline = time.monotonic() + 10
        while (ready(srv)["slots_in_use"], ready(srv)["queued"]) != (2, 2):
            assert time.monotonic() < deadline, ready(srv)
            await asyncio.sleep(0.02)
        r = await c.post("/v1/completions", json=plain(9))
        assert r.status_code == 429 and r.headers["retry-after"]
        assert r.json()["error"]["code"] == "server_busy"
        results = await asyncio.gather(*long)  # the queued ones got slots and completed
        assert [x["usage"]["completion_tokens"] for x in results] == [60] * 4


async def test_queued_request_that_disconnects_never_reaches_a_lane(own_server):
    srv = own_server("--parallel", "1", "--max-queue", "4", "--threads", "2")
    srv.wait_ready()
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=120) as c:
        running = asyncio.ensure_future(stream_completion(c, body(1, max_tokens=200)))
        deadline = time.monotonic() + 10
        while ready(srv)["slots_in_use"] != 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        queued = asyncio.ensure_future(c.post("/v1/completions", json=plain(2),
                                              headers={"X-Request-ID": "queued-then-gone"}))
        deadline = time.monotonic() + 10
        while ready(srv)["queued"] != 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        queued.cancel()  # the client goes away while queued
        deadline = time.monotonic() + 2
        while ready(srv)["queued"] != 0:
            assert time.monotonic() < deadline, "the queue kept a disconnected request"
            await asyncio.sleep(0.01)
        assert (await running)["usage"]["completion_tokens"] == 200
    gone = srv.records("queued-then-gone")
    assert len(gone) == 1 and gone[0]["outcome"] == "disconnect"
    assert gone[0]["admission_ms"] is None and gone[0]["prompt_tokens"] == 0  # never admitted to a lane


async def test_lane_sigkill_with_eight_in_flight_ends_all_eight_within_a_second(server8):
    async with httpx.AsyncClient(base_url=server8.base_url, timeout=120) as c:
        started = []
        tasks = [asyncio.ensure_future(stream_completion(c, body(i, max_tokens=2000), on_chunk=lambda: started.append(1)))
                 for i in range(8)]
        deadline = time.monotonic() + 30
        while ready(server8)["slots_in_use"] < 8 or len(started) < 16:
            assert time.monotonic() < deadline, (ready(server8), len(started), [t.done() for t in tasks])
            await asyncio.sleep(0.02)
        pid = ready(server8)["lanes"][0]["pid"]
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        results = await asyncio.wait_for(asyncio.gather(*tasks), 5)
        elapsed = time.monotonic() - t0
    assert all(r["error"] is not None and r["error"]["code"] == "lane_died" for r in results)
    assert elapsed <= 1.0, elapsed
    deadline = time.monotonic() + 30
    while ready(server8)["lanes"][0]["state"] not in ("ready", "busy"):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert ready(server8)["lanes"][0]["restarts"] == 1


async def test_long_prompt_arriving_mid_stream_stalls_others_at_most_one_chunk(server8):
    async with httpx.AsyncClient(base_url=server8.base_url, timeout=120) as c:
        marks = {}
        streams = [asyncio.ensure_future(stream_completion(c, body(i, max_tokens=600))) for i in range(3)]
        await asyncio.sleep(1.5)
        long_prompt = " ".join(f"item{i}" for i in range(500))  # ~1900 tokens: ~15 chunks of 128
        t0 = time.monotonic()
        long = await c.post("/v1/completions", json={"model": "smollm2", "prompt": long_prompt, "max_tokens": 1})
        marks["long"] = (t0, time.monotonic())
        results = await asyncio.gather(*streams)
    assert long.status_code == 200, long.text
    assert long.json()["usage"]["prompt_tokens"] > 1500
    start, end = marks["long"]
    for r in results:
        assert r["usage"]["completion_tokens"] == 600
        during = [b - a for a, b in zip(r["times"], r["times"][1:]) if start <= b <= end]
        assert during, "no token arrived while the long prompt was prefilled"
        # Unchunked, the 3000-token prefill would hold every stream for its whole duration.
        assert max(during) < 0.5 * (end - start), (max(during), end - start)


async def test_disconnect_during_prefill_frees_the_slot_at_the_next_chunk(server8):
    """R7: a client gone while its long prompt is being read: the lane drops it at the next prefill
    chunk (128 tokens here), produces no token for it, and the slot is free again."""
    long_prompt = " ".join(f"item{i}" for i in range(500))  # ~1900 tokens: ~15 chunks
    async with httpx.AsyncClient(base_url=server8.base_url, timeout=120) as c:
        task = asyncio.ensure_future(c.post("/v1/completions", headers={"X-Request-ID": "prefill-gone"},
                                            json={"model": "smollm2", "prompt": long_prompt, "max_tokens": 5}))
        deadline = time.monotonic() + 10
        while ready(server8)["slots_in_use"] != 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        task.cancel()
        t0 = time.monotonic()
        while ready(server8)["slots_in_use"]:
            assert time.monotonic() - t0 < 2.0, "the prefill was not dropped"
            await asyncio.sleep(0.01)
    gone = server8.records("prefill-gone")
    assert gone[0]["outcome"] == "disconnect" and gone[0]["completion_tokens"] == 0 and gone[0]["ttft_ms"] is None
