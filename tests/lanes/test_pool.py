"""LanePool over real lane processes running the synthetic backend: start, handshake,
streaming, n choices, collect mode, slots (many requests per replica), busy, cancel,
backpressure, drain, shutdown, startup failures."""
import asyncio
import os
import time

import pytest

from gateway.cli.bench.synthetic import synthetic_token
from lanes import wire
from lanes.api import ChoiceDone, Chunk, Framing, GenerationParams, LaneBusy, LaneError, LaneModelSpec, LaneStartupError
from lanes.names import list_names
from lanes.pool import LanePool

from .conftest import escaped, synthetic_events, unframe, wait_for

SSE = (b'data: {"t":"', b'"}\n\n')


def framing(prefix: bytes, suffix: bytes, choice: int = 0, channel: int = wire.CONTENT):
    return Framing(choice, channel, prefix, suffix)


def sse(num_choices: int = 1):
    return [framing(*SSE, choice=c) for c in range(num_choices)]


async def collect(stream):
    chunks, dones = {}, []
    async for item in stream:
        if isinstance(item, Chunk):
            chunks.setdefault(item.choice, []).append(item.data)
        else:
            assert isinstance(item, ChoiceDone)
            dones.append(item)
    return {c: b"".join(parts) for c, parts in chunks.items()}, dones


def in_flight(pool, model="syn"):
    return pool.capacity(model)[0]


async def test_start_handshake_stream_and_clean_shutdown(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:n_ctx=2048,n_vocab=321", replicas=2, num_slots=4,
                                    max_batch_tokens=64)])
    pool.start()
    statuses = pool.statuses()
    assert [s.state for s in statuses] == ["ready", "ready"]
    assert [(s.in_flight, s.num_slots, s.kv_cache_bytes) for s in statuses] == [(0, 4, 0), (0, 4, 0)]
    pids = [s.pid for s in statuses]
    assert all(pids) and len(set(pids)) == 2
    assert pool.model_names() == ["syn"]
    assert pool.lane_info("syn") == {"n_ctx": 2048, "n_vocab": 321, "num_slots": 4, "kv_cache_bytes": 0,
                                     "max_batch_tokens": 64, "n_embd": 8}
    assert pool.capacity("syn") == (0, 8)
    pool.attach(asyncio.get_running_loop())
    stream = pool.submit("syn", [1, 2, 3], GenerationParams(max_tokens=20, seed=5), 42, num_choices=2,
                         framings=[framing(*SSE, choice=0), framing(b"<", b">", choice=1)])
    chunks, dones = await collect(stream)
    assert unframe(chunks[0], *SSE) == synthetic_events(20)
    assert unframe(chunks[1], b"<", b">") == synthetic_events(20)
    assert sorted((d.choice, d.finish_reason, d.prompt_tokens, d.completion_tokens, d.text) for d in dones) == [
        (0, "length", 3, 20, b""), (1, "length", 3, 20, b"")]
    assert stream.finished
    await wait_for(lambda: all(s.state == "ready" for s in pool.statuses()), 1, "lanes ready")
    assert pool.capacity("syn") == (0, 8)
    procs = [r.proc for replicas in pool._replicas.values() for r in replicas]
    pool.close()
    assert [p.returncode for p in procs] == [0, 0]  # exited on SHUTDOWN, not killed
    assert [s.state for s in pool.statuses()] == ["stopped", "stopped"]
    assert pool.capacity("syn") == (0, 0)
    pool.close()  # idempotent


async def test_collect_mode_delivers_each_choices_escaped_text_with_its_done(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=500")])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    stream = pool.submit("syn", [1, 2], GenerationParams(max_tokens=15), 5, num_choices=3, collect=True)
    items = [i async for i in stream]
    assert all(isinstance(i, ChoiceDone) for i in items)  # no chunks in collect mode
    assert sorted(d.choice for d in items) == [0, 1, 2]
    for d in items:
        assert d.text == b"".join(escaped(synthetic_token(i)) for i in range(15))
        assert (d.finish_reason, d.prompt_tokens, d.completion_tokens, d.cached_tokens) == ("length", 2, 15, 0)


async def test_every_slot_taken_is_busy_unknown_model_and_spreading(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=20000", replicas=2, num_slots=2)])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    with pytest.raises(KeyError):
        pool.submit("nope", [1], GenerationParams(max_tokens=1), 1, framings=sse())
    streams = [pool.submit("syn", [1], GenerationParams(max_tokens=100_000), rid, framings=sse())
               for rid in range(1, 5)]
    # The replica with the most free slots takes each request: two per replica.
    assert sorted((s.state, s.in_flight) for s in pool.statuses()) == [("busy", 2), ("busy", 2)]
    assert pool.capacity("syn") == (4, 4)
    with pytest.raises(LaneBusy):
        pool.submit("syn", [1], GenerationParams(max_tokens=1), 5, framings=sse())
    streams[0].cancel()
    await wait_for(lambda: in_flight(pool) == 3, 5, "the cancelled request's slot")
    extra = pool.submit("syn", [1], GenerationParams(max_tokens=2), 6, framings=sse())  # a slot is free again
    _, dones = await collect(extra)
    assert [d.completion_tokens for d in dones] == [2]
    for s in streams[1:]:
        s.cancel()
    await wait_for(lambda: all(s.state == "ready" for s in pool.statuses()), 5, "lanes freed")
    assert pool.capacity("syn") == (0, 4)


async def test_a_request_with_more_choices_than_free_slots_waits_in_the_lane(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=1000", num_slots=2)])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    # One request = one pool slot; its 3 sequences share the lane's 2 engine slots (FIFO).
    chunks, dones = await collect(pool.submit("syn", [1], GenerationParams(max_tokens=10), 1, num_choices=3,
                                              framings=sse(3)))
    assert sorted(chunks) == [0, 1, 2]
    assert all(unframe(chunks[c], *SSE) == synthetic_events(10) for c in range(3))
    assert sorted(d.choice for d in dones) == [0, 1, 2]


async def test_interleaved_requests_on_one_replica_each_get_exactly_their_own_text(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=2000", num_slots=4)])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    lengths = {11: 40, 12: 25, 13: 60, 14: 33}
    streams = {rid: pool.submit("syn", [1] * (rid - 10), GenerationParams(max_tokens=n), rid,
                                num_choices=2 if rid == 13 else 1,
                                framings=[framing(b"[%d:" % rid, b"]", choice=c) for c in range(2)])
               for rid, n in lengths.items()}
    assert pool.statuses()[0].in_flight == 4  # all on the one replica, batched
    results = await asyncio.gather(*(collect(s) for s in streams.values()))
    for (rid, n), (chunks, dones) in zip(lengths.items(), results):
        # A delta of any other request (same token texts!) would show up as an extra event.
        num_choices = 2 if rid == 13 else 1
        assert sorted(chunks) == list(range(num_choices)), rid
        for c in range(num_choices):
            assert unframe(chunks[c], b"[%d:" % rid, b"]") == synthetic_events(n), (rid, c)
        assert sorted((d.choice, d.completion_tokens, d.prompt_tokens) for d in dones) == [
            (c, n, rid - 10) for c in range(num_choices)]
    await wait_for(lambda: pool.statuses()[0].state == "ready", 2, "lane idle")


async def test_cancelled_requests_records_never_reach_another_request(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=1000", num_slots=3)], output_ring_bytes=4096)
    pool.start()
    pool.attach(asyncio.get_running_loop())
    victim = pool.submit("syn", [1], GenerationParams(max_tokens=100_000), 21, framings=[framing(b"<v>", b"|")])
    other = pool.submit("syn", [1], GenerationParams(max_tokens=300), 22, framings=[framing(b"<o>", b"|")])
    first = await victim.__anext__()
    assert isinstance(first, Chunk)
    time.sleep(0.05)  # the loop stalls: the victim's records pile up in the ring and the lane's backlog
    victim.cancel()
    late = pool.submit("syn", [1], GenerationParams(max_tokens=200), 23, framings=[framing(b"<l>", b"|")])
    (o_chunks, o_dones), (l_chunks, l_dones) = await asyncio.gather(collect(other), collect(late))
    assert sorted(o_chunks) == sorted(l_chunks) == [0]
    assert unframe(o_chunks[0], b"<o>", b"|") == synthetic_events(300)
    assert unframe(l_chunks[0], b"<l>", b"|") == synthetic_events(200)
    assert [d.finish_reason for d in o_dones + l_dones] == ["length", "length"]
    assert [i async for i in victim] == []
    await wait_for(lambda: pool.statuses()[0].state == "ready", 5, "lane idle")
    assert pool._replicas["syn"][0].channels.reader.num_routes == 0  # the victim's route went too


async def test_cancel_frees_the_slot_within_one_token(make_pool):
    step_s = 0.2
    pool = make_pool([LaneModelSpec("syn", f"synthetic:step_us={int(step_s * 1e6)}", num_slots=1)])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    stream = pool.submit("syn", [1, 2], GenerationParams(max_tokens=10_000), 7, framings=sse())
    first = await stream.__anext__()
    assert isinstance(first, Chunk)
    with pytest.raises(LaneBusy):  # the one slot is taken
        pool.submit("syn", [1], GenerationParams(max_tokens=2), 8, framings=sse())
    t0 = time.monotonic()
    stream.cancel()
    stream.cancel()  # idempotent
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    await wait_for(lambda: in_flight(pool) == 0, 5, "slot freed")
    # The step in progress finishes, then the cancel is read: well under two steps.
    assert time.monotonic() - t0 <= step_s + 0.15
    assert pool.statuses()[0].state == "ready"
    pid = pool.statuses()[0].pid
    chunks, dones = await collect(pool.submit("syn", [1], GenerationParams(max_tokens=2), 8, framings=sse()))
    assert [d.finish_reason for d in dones] == ["length"] and unframe(chunks[0], *SSE) == synthetic_events(2)
    assert pool.statuses()[0].pid == pid and pool.statuses()[0].restarts == 0  # no kill


async def test_backpressure_merges_deltas_without_loss(make_pool):
    """Tiny output ring, a consumer that does not read for a while: the lane keeps generating,
    merges deltas in its pending buffer, and the concatenated bytes are exact."""
    n = 3000
    pool = make_pool([LaneModelSpec("syn", "synthetic:")], output_ring_bytes=4096)
    pool.start()
    pool.attach(asyncio.get_running_loop())
    stream = pool.submit("syn", [1], GenerationParams(max_tokens=n), 9, framings=[framing(b"", b"|")])
    time.sleep(0.3)  # the pump cannot run: generation finishes long before we read
    chunks, dones = await collect(stream)
    # Deltas merged in the lane's backlog arrive as one event (one framing) with several tokens.
    assert unframe(chunks[0], b"", b"|") == synthetic_events(n)
    assert chunks[0].count(b"|") < n  # some deltas really were merged
    assert dones[0].completion_tokens == n


async def test_output_overflow_errors_that_request_only(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:", num_slots=2)], output_ring_bytes=4096,
                     max_pending_bytes=8192)
    pool.start()
    pool.attach(asyncio.get_running_loop())
    flood = pool.submit("syn", [1], GenerationParams(max_tokens=1_000_000), 11, framings=[framing(b"", b"")])
    small = pool.submit("syn", [1], GenerationParams(max_tokens=5), 12, framings=sse())
    time.sleep(0.5)  # the pump cannot read: the lane's backlog for `flood` passes its cap
    with pytest.raises(LaneError) as e:
        await collect(flood)
    assert e.value.code == "output_overflow"
    chunks, dones = await collect(small)  # the other request on the same replica is intact
    assert unframe(chunks[0], *SSE) == synthetic_events(5) and dones[0].finish_reason == "length"
    await wait_for(lambda: pool.statuses()[0].state == "ready", 2, "lane ready")
    chunks, dones = await collect(pool.submit("syn", [1], GenerationParams(max_tokens=3), 13, framings=sse()))
    assert dones[0].finish_reason == "length"
    assert pool.statuses()[0].restarts == 0


async def test_bad_request_is_reported_and_lane_stays(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:n_ctx=16")])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    with pytest.raises(LaneError) as e:
        await collect(pool.submit("syn", list(range(40)), GenerationParams(max_tokens=3), 1, framings=sse()))
    assert e.value.code == "bad_request" and "context" in e.value.message
    assert in_flight(pool) == 0
    chunks, dones = await collect(pool.submit("syn", [1], GenerationParams(max_tokens=3), 2, framings=sse()))
    assert len(dones) == 1


async def test_submit_validates_its_arguments(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:")])
    pool.start()
    with pytest.raises(RuntimeError, match="attach"):
        pool.submit("syn", [1], GenerationParams(max_tokens=1), 1)
    pool.attach(asyncio.get_running_loop())
    for kwargs in ({"num_choices": 0}, {"num_choices": 129}):
        with pytest.raises(ValueError):
            pool.submit("syn", [1], GenerationParams(max_tokens=1), 1, **kwargs)
    with pytest.raises(ValueError):
        pool.submit("syn", [], GenerationParams(max_tokens=1), 1)
    for rid in (0, 2**64):
        with pytest.raises(ValueError):
            pool.submit("syn", [1], GenerationParams(max_tokens=1), rid)
    assert in_flight(pool) == 0


async def test_drain_lets_short_requests_finish_and_ends_long_ones(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=10000", num_slots=2)])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    short = pool.submit("syn", [1], GenerationParams(max_tokens=5), 1, framings=sse())
    long = pool.submit("syn", [1], GenerationParams(max_tokens=100_000), 2, framings=sse())
    pid = pool.statuses()[0].pid
    short_task = asyncio.ensure_future(collect(short))
    long_task = asyncio.ensure_future(collect(long))
    await pool.drain(0.5)
    with pytest.raises(LaneBusy):
        pool.submit("syn", [1], GenerationParams(max_tokens=1), 3, framings=sse())
    assert len((await short_task)[1]) == 1
    with pytest.raises(LaneError) as e:
        await long_task
    assert e.value.code == "shutdown"
    assert in_flight(pool) == 0
    assert [(s.pid, s.restarts, s.in_flight) for s in pool.statuses()] == [(pid, 0, 0)]  # cancelled, not killed


async def test_replica_is_ready_again_after_drain(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=10000")])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    long = pool.submit("syn", [1], GenerationParams(max_tokens=100_000), 1, framings=sse())
    await long.__anext__()
    await pool.drain(0.05)
    await asyncio.sleep(0.2)  # the lane's DONE(cancelled) arrives
    assert [(s.state, s.in_flight) for s in pool.statuses()] == [("ready", 0)]


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
    with pytest.raises(ValueError, match="num_slots"):
        LaneModelSpec("x", "p", num_slots=0)
    with pytest.raises(ValueError, match="num_slots"):
        LaneModelSpec("x", "p", num_slots=257)
    with pytest.raises(ValueError, match="max_batch_tokens"):
        LaneModelSpec("x", "p", num_slots=16, max_batch_tokens=8)
    with pytest.raises(ValueError):
        GenerationParams(max_tokens=0)
    with pytest.raises(ValueError, match="duplicate"):
        LanePool([LaneModelSpec("x", "p"), LaneModelSpec("x", "q")])
