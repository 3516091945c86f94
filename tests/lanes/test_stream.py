"""RequestStream ordering, merging of lagging chunks, errors, cancel and the sink controls."""
import asyncio

import pytest

from lanes.api import ChoiceDone, Chunk, LaneError
from lanes.stream import RequestStream

DONE0 = ChoiceDone(0, "length", 1, 2, 3, 4)


class FakeRoute:
    """The replica's native route controls (lanes._ring.RingReader), recorded."""

    def __init__(self):
        self.calls = []

    def set_socket(self, rid, fd):
        self.calls.append(("socket", rid, fd))

    def set_direct(self, rid, on):
        self.calls.append(("direct", rid, on))

    def route_stats(self, rid):
        return 0, 0, 7


async def test_lagging_chunks_merge_per_choice_and_keep_order():
    cancels = []
    s = RequestStream(1, 2, FakeRoute(), cancels.append)
    for d in (b"a", b"b", b"c"):
        s.push_chunk(0, d)
    s.push_done(DONE0, last=False)
    s.push_chunk(1, b"x")
    s.push_chunk(1, b"y")
    s.push_done(ChoiceDone(1, "stop", 1, 2, 3, 4), last=True)
    assert s.finished
    items = [i async for i in s]
    assert items == [Chunk(0, b"abc"), DONE0, Chunk(1, b"xy"), ChoiceDone(1, "stop", 1, 2, 3, 4)]
    s.cancel()
    assert cancels == []  # already finished: nothing to cancel


async def test_interleaved_choices_are_not_merged_across_each_other():
    s = RequestStream(1, 2, FakeRoute(), lambda rid: None)
    for choice, d in ((0, b"a"), (1, b"b"), (0, b"c"), (0, b"d")):
        s.push_chunk(choice, d)
    s.push_done(DONE0, last=True)
    assert [i async for i in s] == [Chunk(0, b"a"), Chunk(1, b"b"), Chunk(0, b"cd"), DONE0]


async def test_error_after_delivered_items_and_idempotent_cancel():
    cancels = []
    s = RequestStream(5, 1, FakeRoute(), cancels.append)
    s.push_chunk(0, b"a")
    s.fail(LaneError("lane_died", "gone"))
    s.fail(LaneError("shutdown", "second failure is ignored"))
    assert await s.__anext__() == Chunk(0, b"a")
    with pytest.raises(LaneError, match="lane_died"):
        await s.__anext__()
    route = FakeRoute()
    s2 = RequestStream(6, 1, route, cancels.append)
    s2.push_chunk(0, b"a")
    s2.cancel()
    s2.cancel()
    assert cancels == [6]
    assert ("socket", 6, -1) in route.calls  # the pump must never write to its sink again
    assert [i async for i in s2] == [Chunk(0, b"a")]  # received before the cancel: still delivered
    s2.push_chunk(0, b"late")  # records that still arrive after the cancel are dropped
    s2.push_done(DONE0, last=True)
    assert [i async for i in s2] == []


async def test_the_event_count_stops_at_the_cancel():
    """Deltas the relay frames after a cancel are never written: the count the closing events
    continue from is the one at the cancel, so the client's sequence numbers have no gap."""
    route = FakeRoute()
    numbers = iter(range(7, 100))
    route.route_stats = lambda rid: (0, 0, next(numbers))
    s = RequestStream(8, 1, route, lambda rid: None)
    s.push_chunk(0, b"numbered 6")
    s.cancel()
    assert s.next_number() == 7
    s.push_chunk(0, b"numbered 7, framed after the cancel")
    assert [i async for i in s] == [Chunk(0, b"numbered 6")]
    assert s.next_number() == 7


async def test_whole_text_consumer_is_woken_by_done_not_by_chunks():
    s = RequestStream(7, 1, FakeRoute(), lambda rid: None)
    s.wake_on_chunks = False
    wakes = []
    consumer = asyncio.ensure_future(s.__anext__())
    await asyncio.sleep(0)
    for d in (b"a", b"b", b"c"):
        s.push_chunk(0, d)
        await asyncio.sleep(0)
        wakes.append(consumer.done())
    assert wakes == [False, False, False]
    s.push_done(DONE0, last=True)
    assert await consumer == Chunk(0, b"abc")
    assert [i async for i in s] == [DONE0]


async def test_sink_controls_reach_the_route_and_direct_waits_for_queued_items():
    route = FakeRoute()
    partials = []
    s = RequestStream(9, 1, route, lambda rid: None)
    s.attach_sink(42, lambda unsent, err: partials.append((unsent, err)))
    s.set_direct(True)
    assert route.calls == [("socket", 9, 42), ("direct", 9, True)]
    route.calls.clear()
    s.push_chunk(0, b"queued")  # an item the consumer has not written yet ...
    s.set_direct(True)
    assert route.calls == [("direct", 9, False)]  # ... a direct write would overtake it
    assert await s.__anext__() == Chunk(0, b"queued")
    route.calls.clear()
    s.set_direct(True)
    assert route.calls == [("direct", 9, True)]
    s.push_partial(b"tail", 0)
    assert partials == [(b"tail", 0)]
    route.calls.clear()
    s.detach_sink()
    assert route.calls == [("socket", 9, -1)]
    s.push_partial(b"more", 0)  # no sink: nothing to hand it to
    assert partials == [(b"tail", 0)]
    s.push_done(DONE0, last=True)
    route.calls.clear()
    s.set_direct(True)  # over: the route is gone, nothing reaches the relay
    s.attach_sink(43, None)
    s.detach_sink()
    assert route.calls == []


def test_a_stream_cancelled_from_outside_never_attaches_its_sink_again():
    """gateway.serve.control may cancel a stream before its consumer attached the socket: the pump
    must not get the socket (nor direct mode) for a request that is over for the client."""
    route = FakeRoute()
    s = RequestStream(7, 1, route, lambda rid: None)
    s.cancel()
    route.calls.clear()
    s.attach_sink(5, lambda unsent, errno: None)
    s.set_direct(True)
    assert route.calls == [] and s.on_partial is None


async def test_the_event_count_outlives_the_route():
    s = RequestStream(1, 1, FakeRoute(), lambda rid: None)
    s.push_done(ChoiceDone(0, "stop", 1, 2, 3, 4), last=True)
    assert s.next_number() == 7  # read as the route went
