"""RequestStream ordering, merging of lagging chunks, errors and cancel."""
import pytest

from lanes.api import ChoiceDone, Chunk, LaneError
from lanes.stream import RequestStream

DONE0 = ChoiceDone(0, "length", 1, 2, 3, 4)


async def test_lagging_chunks_merge_per_choice_and_keep_order():
    cancels = []
    s = RequestStream(1, 2, cancels.append)
    for d in (b"a", b"b", b"c"):
        s.push_chunk(0, d)
    s.push_done(DONE0, last=False)
    s.push_chunk(1, b"x")
    s.push_chunk(1, b"y")
    s.push_done(ChoiceDone(1, "stop", 1, 2, 3, 4), last=True)
    items = [i async for i in s]
    assert items == [Chunk(0, b"abc"), DONE0, Chunk(1, b"xy"), ChoiceDone(1, "stop", 1, 2, 3, 4)]
    s.cancel()
    assert cancels == []  # already finished: nothing to cancel


async def test_error_after_delivered_items_and_idempotent_cancel():
    cancels = []
    s = RequestStream(5, 1, cancels.append)
    s.push_chunk(0, b"a")
    s.fail(LaneError("lane_died", "gone"))
    assert await s.__anext__() == Chunk(0, b"a")
    with pytest.raises(LaneError, match="lane_died"):
        await s.__anext__()
    s2 = RequestStream(6, 1, cancels.append)
    s2.push_chunk(0, b"a")
    s2.cancel()
    s2.cancel()
    assert cancels == [6]
    assert [i async for i in s2] == []


async def test_whole_text_consumer_is_woken_by_done_not_by_chunks():
    import asyncio

    s = RequestStream(7, 1, lambda rid: None)
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
