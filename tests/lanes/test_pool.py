"""LanePool over real lane processes running the synthetic backend: start, handshake,
streaming, n choices, busy, cancel, backpressure, drain, shutdown, startup failures."""
import asyncio
import json
import os
import time

import pytest

from lanes.api import ChoiceDone, Chunk, Framing, GenerationParams, LaneBusy, LaneError, LaneModelSpec, LaneStartupError
from lanes.names import list_names
from lanes.pool import LanePool

from .conftest import synthetic_text, wait_for

SSE = Framing(b'data: {"t":"', b'"}\n\n')


async def collect(stream):
    chunks, dones = {}, []
    async for item in stream:
        if isinstance(item, Chunk):
            chunks.setdefault(item.choice, []).append(item.data)
        else:
            dones.append(item)
    return chunks, dones


def texts_from_sse(data: bytes) -> list[str]:
    return [json.loads(line[len(b"data: "):])["t"] for line in data.split(b"\n\n") if line]


async def test_start_handshake_stream_and_clean_shutdown(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:n_ctx=2048,n_vocab=321", replicas=2)])
    pool.start()
    statuses = pool.statuses()
    assert [s.state for s in statuses] == ["ready", "ready"]
    pids = [s.pid for s in statuses]
    assert all(pids) and len(set(pids)) == 2
    assert pool.model_names() == ["syn"]
    assert pool.lane_info("syn") == {"n_ctx": 2048, "n_vocab": 321}
    pool.attach(asyncio.get_running_loop())
    stream = pool.submit("syn", [1, 2, 3], GenerationParams(max_tokens=20, seed=5), [SSE, Framing(b"<", b">")], 42)
    chunks, dones = await collect(stream)
    assert texts_from_sse(b"".join(chunks[0])) == [synthetic_text(i) for i in range(20)]
    assert b"".join(chunks[1]).decode() == "".join(
        "<" + json.dumps(synthetic_text(i), ensure_ascii=False)[1:-1].replace("\u2028", "\\u2028") + ">"
        for i in range(20))
    assert [(d.choice, d.finish_reason, d.prompt_tokens, d.completion_tokens) for d in dones] == [
        (0, "length", 3, 20), (1, "length", 3, 20)]
    await wait_for(lambda: all(s.state == "ready" for s in pool.statuses()), 1, "lanes ready")
    procs = [s.proc for slots in pool._slots.values() for s in slots]
    pool.close()
    assert [p.returncode for p in procs] == [0, 0]  # exited on SHUTDOWN, not killed
    assert [s.state for s in pool.statuses()] == ["stopped", "stopped"]
    pool.close()  # idempotent


async def test_busy_unknown_model_and_round_robin(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=20000", replicas=2)])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    with pytest.raises(KeyError):
        pool.submit("nope", [1], GenerationParams(max_tokens=1), [SSE], 1)
    a = pool.submit("syn", [1], GenerationParams(max_tokens=1000), [SSE], 1)
    b = pool.submit("syn", [1], GenerationParams(max_tokens=1000), [SSE], 2)
    assert sorted(s.state for s in pool.statuses()) == ["busy", "busy"]
    with pytest.raises(LaneBusy):
        pool.submit("syn", [1], GenerationParams(max_tokens=1), [SSE], 3)
    a.cancel()
    b.cancel()
    await wait_for(lambda: all(s.state == "ready" for s in pool.statuses()), 1, "lanes freed")


async def test_cancel_frees_lane_within_one_token(make_pool):
    step_s = 0.05
    pool = make_pool([LaneModelSpec("syn", f"synthetic:step_us={int(step_s * 1e6)}")])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    stream = pool.submit("syn", [1, 2], GenerationParams(max_tokens=10_000), [SSE], 7)
    first = await stream.__anext__()
    assert isinstance(first, Chunk)
    t0 = time.monotonic()
    stream.cancel()
    stream.cancel()  # idempotent
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    await wait_for(lambda: pool.statuses()[0].state == "ready", 2 * step_s + 0.05, "lane freed")
    assert time.monotonic() - t0 <= step_s + 0.05  # the step in progress finishes, then the cancel
    pid = pool.statuses()[0].pid
    chunks, dones = await collect(pool.submit("syn", [1], GenerationParams(max_tokens=2), [SSE], 8))
    assert [d.finish_reason for d in dones] == ["length"]
    assert pool.statuses()[0].pid == pid and pool.statuses()[0].restarts == 0  # no kill


async def test_backpressure_merges_deltas_without_loss(make_pool):
    """Tiny output ring, a consumer that does not read for a while: the lane keeps generating,
    merges deltas in its pending buffer, and the concatenated bytes are exact."""
    n = 3000
    pool = make_pool([LaneModelSpec("syn", "synthetic:")], output_ring_bytes=4096)
    pool.start()
    pool.attach(asyncio.get_running_loop())
    stream = pool.submit("syn", [1], GenerationParams(max_tokens=n), [Framing(b"", b"|")], 9)
    await asyncio.sleep(0.3)  # generation finishes long before we read
    chunks, dones = await collect(stream)
    data = b"".join(chunks[0]).decode()
    expected = "".join(json.dumps(synthetic_text(i), ensure_ascii=False)[1:-1].replace("\u2028", "\\u2028") + "|"
                       for i in range(n))
    assert data == expected
    assert dones[0].completion_tokens == n


async def test_output_overflow_errors_that_request_only(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:")], output_ring_bytes=4096, max_pending_bytes=8192)
    pool.start()
    pool.attach(asyncio.get_running_loop())
    stream = pool.submit("syn", [1], GenerationParams(max_tokens=100_000), [Framing(b"", b"")], 11)
    # Stop the pump from reading: the lane's backlog passes its cap.
    slot = pool._slots["syn"][0]
    reader = slot.channels.reader
    slot.channels.reader = type("Stalled", (), {"read_batch": lambda self, n: [], "arm": lambda self: False,
                                                "heartbeat_ns": property(lambda s: reader.heartbeat_ns),
                                                "quiet_until_ns": 0})()
    await asyncio.sleep(0.3)
    slot.channels.reader = reader
    slot._schedule_drain()
    with pytest.raises(LaneError) as e:
        await collect(stream)
    assert e.value.code == "output_overflow"
    await wait_for(lambda: pool.statuses()[0].state == "ready", 1, "lane ready")
    chunks, dones = await collect(pool.submit("syn", [1], GenerationParams(max_tokens=3), [SSE], 12))
    assert dones[0].finish_reason == "length"


async def test_bad_request_is_reported_and_lane_stays(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:n_ctx=16")])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    with pytest.raises(LaneError) as e:
        await collect(pool.submit("syn", list(range(40)), GenerationParams(max_tokens=3), [SSE], 1))
    assert e.value.code == "bad_request" and "context" in e.value.message
    chunks, dones = await collect(pool.submit("syn", [1], GenerationParams(max_tokens=3), [SSE], 2))
    assert len(dones) == 1


async def test_drain_lets_short_requests_finish_and_ends_long_ones(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=10000", replicas=2)])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    short = pool.submit("syn", [1], GenerationParams(max_tokens=5), [SSE], 1)
    long = pool.submit("syn", [1], GenerationParams(max_tokens=100_000), [SSE], 2)
    short_task = asyncio.ensure_future(collect(short))
    long_task = asyncio.ensure_future(collect(long))
    await pool.drain(0.3)
    with pytest.raises(LaneBusy):
        pool.submit("syn", [1], GenerationParams(max_tokens=1), [SSE], 3)
    assert len((await short_task)[1]) == 1
    with pytest.raises(LaneError) as e:
        await long_task
    assert e.value.code == "shutdown"
    assert all(s.state == "ready" for s in pool.statuses())  # cancelled, not killed


@pytest.mark.parametrize("path, message", [
    ("synthetic:fail=broken weights", "synthetic model failed to load: broken weights"),
    ("/nonexistent/model.gguf", "/nonexistent/model.gguf"),
])
def test_model_that_fails_to_load_is_a_clean_startup_failure(make_pool, path, message):
    pool = make_pool([LaneModelSpec("good", "synthetic:"), LaneModelSpec("bad", path)])
    with pytest.raises(LaneStartupError) as e:
        pool.start()
    assert "lane bad[0] could not load" in str(e.value) and message in str(e.value)
    assert list_names(pid=os.getpid(), run_id=pool.run_id) == []
    assert [s.state for s in pool.statuses()] == ["stopped", "stopped"]


def test_specs_and_config_are_validated():
    with pytest.raises(ValueError):
        LaneModelSpec("x", "p", replicas=0)
    with pytest.raises(ValueError):
        GenerationParams(max_tokens=0)
    with pytest.raises(ValueError, match="duplicate"):
        LanePool([LaneModelSpec("x", "p"), LaneModelSpec("x", "q")])
