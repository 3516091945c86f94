"""A cancel's DONEs carry the work the lane did (csrc/lane/lane_loop.cpp cancel_request): one per
dropped choice, finish `cancelled`, with its prompt tokens, generated tokens and timings, so the
gateway can record and meter what a disconnected or cancelled request cost (lanes.stream keeps
them after cancel() for accounting only)."""
import asyncio

from lanes.api import Chunk, GenerationParams, LaneModelSpec

from .test_pool import sse


async def _ended(stream, timeout_s: float = 5.0) -> None:
    done = asyncio.get_running_loop().create_future()
    stream.when_ended(lambda: done.done() or done.set_result(None))
    await asyncio.wait_for(done, timeout_s)


async def test_cancel_dones_carry_each_choices_counts(make_pool):
    # One slot, two choices: choice 0 runs, choice 1 waits — it did nothing and says so.
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=5000", num_slots=1)])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    stream = pool.submit("syn", [1, 2, 3, 4, 5], GenerationParams(max_tokens=100_000), 11, num_choices=2,
                         framings=sse(2))
    received = 0
    async for item in stream:
        assert isinstance(item, Chunk) and item.choice == 0
        received += item.data.count(b"data: ")
        if received >= 20:
            break
    stream.cancel()
    assert [i async for i in stream] == []  # iteration ends; the DONEs are for accounting only
    await _ended(stream)
    dones = sorted(stream.unaccounted_dones(), key=lambda d: d.choice)
    assert [(d.choice, d.finish_reason) for d in dones] == [(0, "cancelled"), (1, "cancelled")]
    ran, waited = dones
    assert ran.prompt_tokens == 5 and ran.completion_tokens >= received
    assert ran.prefill_ns > 0 and ran.decode_ns > 0
    assert (waited.prompt_tokens, waited.completion_tokens, waited.prefill_ns, waited.decode_ns) == (0, 0, 0, 0)
    assert stream.first_direct_ns == 0  # nothing went out natively (no sink attached)
    assert stream.unaccounted_dones() == []  # handed out once
    assert pool.capacity("syn")[0] == 0


async def test_dones_already_received_before_cancel_are_accounted(make_pool):
    """The lane finished, the consumer stopped reading (a disconnect): its ChoiceDone, unread,
    is handed out for accounting too."""
    pool = make_pool([LaneModelSpec("syn", "synthetic:")])
    pool.start()
    pool.attach(asyncio.get_running_loop())
    stream = pool.submit("syn", [1, 2, 3], GenerationParams(max_tokens=4), 12, framings=sse())
    await _ended(stream)
    stream.cancel()
    (done,) = stream.unaccounted_dones()
    assert (done.finish_reason, done.prompt_tokens, done.completion_tokens) == ("length", 3, 4)
