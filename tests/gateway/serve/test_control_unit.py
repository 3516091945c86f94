"""gateway/serve/control.py's registry, the admission queue's abort, and Generation.abort — no lanes."""
from __future__ import annotations

import asyncio

import pytest

from gateway.serve.admission import AdmissionAborted, AdmissionQueue
from gateway.serve.lanes import GenerationParams, LaneBusy
from gateway.serve.control import CANCELLED_STATUS, RequestControl, cancelled_error, outcome_for
from gateway.serve.generation import Generation, GenerationCancelled, Submission


def test_registry_cancels_by_id_and_by_model():
    control, calls = RequestControl(), []

    def callback(rid, result=True):
        return lambda: calls.append(rid) or result

    control.register("a", "m1", callback("a"))
    control.register("b", "m2", callback("b"))
    control.register("c", "m1", callback("c", result=False))  # already produced every token
    assert control.cancel("b") and calls == ["b"]
    assert not control.cancel("zzz")
    assert control.cancel_all("m1") == ["a"] and calls == ["b", "a", "c"]
    assert control.cancel_all() == ["a", "b"]
    control.unregister("a")
    control.unregister("a")  # idempotent
    assert "a" not in control and len(control) == 2 and control.cancel_all("m3") == []


def test_cancelled_error_and_outcomes():
    error = cancelled_error()
    assert error.status == CANCELLED_STATUS == 499 and error.code == "request_cancelled"
    assert error.envelope()["error"]["type"] == "cancelled_error" and error.headers["x-should-retry"] == "false"
    assert outcome_for(499, "request_cancelled") == "cancelled" and outcome_for(200, "request_cancelled") == "cancelled"
    assert outcome_for(429, "server_busy") == "saturated" and outcome_for(503, "lane_died") == "error"


async def test_abort_takes_a_waiter_out_of_the_queue_and_passes_the_wake_up_on():
    queue, free = AdmissionQueue(max_queue=4, timeout_s=30), []

    def try_submit(tag):
        def go():
            if not free:
                raise LaneBusy("full")
            return free.pop()
        return go

    abort = asyncio.get_running_loop().create_future()
    first = asyncio.ensure_future(queue.admit("m", try_submit("first"), abort))
    second = asyncio.ensure_future(queue.admit("m", try_submit("second")))
    await asyncio.sleep(0.01)
    assert queue.depth("m") == 2
    abort.set_result(None)
    with pytest.raises(AdmissionAborted):
        await asyncio.wait_for(first, 1)
    assert queue.depth("m") == 1
    free.append("slot")
    queue.notify("m")
    assert await asyncio.wait_for(second, 1) == "slot" and queue.depth("m") == 0


class FakeStream:
    def __init__(self, items=(), finished=False):
        self.items, self.finished, self.cancelled, self.num_choices = list(items), finished, False, 1

    def cancel(self):
        self.cancelled = True

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.cancelled or not self.items:
            raise StopAsyncIteration
        return self.items.pop(0)


class FakePool:
    def __init__(self, streams):
        self.streams = list(streams)

    def submit(self, *args, **kwargs):
        if not self.streams:
            raise LaneBusy("full")
        return self.streams.pop(0)


def generation(pool, num_prompts=1):
    subs = [Submission([1, 2], GenerationParams(max_tokens=4), 1, [], k) for k in range(num_prompts)]
    return Generation(pool, AdmissionQueue(max_queue=4, timeout_s=30), "m", subs)


async def test_generation_abort_while_queued_raises_cancelled_from_start():
    g = generation(FakePool([]))
    start = asyncio.ensure_future(g.start())
    await asyncio.sleep(0.01)
    assert g.abort() and g.abort()  # idempotent
    with pytest.raises(GenerationCancelled) as info:
        await asyncio.wait_for(start, 1)
    assert info.value.code == "request_cancelled"


async def test_generation_abort_while_running_cancels_the_stream_and_segments_raise():
    stream = FakeStream(items=["a", "b"])
    g = generation(FakePool([stream]))
    await g.start()
    seen = []
    with pytest.raises(GenerationCancelled):
        async for _, s in g.segments():
            async for item in s:
                seen.append(item)
                assert g.abort()
    assert seen == ["a"] and stream.cancelled


async def test_generation_abort_after_the_lane_finished_is_refused():
    g = generation(FakePool([FakeStream(items=["a"], finished=True)]))
    await g.start()
    assert not g.abort()
    assert [item async for _, s in g.segments() async for item in s] == ["a"]
    assert not g.abort()  # every segment relayed


async def test_generation_abort_between_prompts_drops_the_later_ones():
    first, second = FakeStream(items=["a"], finished=True), FakeStream(items=["b"])
    g = generation(FakePool([first, second]), num_prompts=2)
    await g.start()
    assert g.abort() and not first.cancelled  # the finished first prompt is relayed to its end
    seen = []
    with pytest.raises(GenerationCancelled):
        async for _, s in g.segments():
            seen.extend([item async for item in s])
    assert seen == ["a"] and not second.cancelled and g.num_choices == 2
