"""Fixtures for lane-pool tests: pools that are always closed, and a /dev/shm leak check."""
import asyncio
import json
import os

import pytest

from gateway.cli.bench.synthetic import synthetic_token
from lanes.api import Chunk
from lanes.config import PoolConfig
from lanes.names import list_names
from lanes.pool import LanePool


def escaped(text: str) -> bytes:
    """What the gateway's DeltaRelay makes of lane text: JSON-escaped (U+2028/9 too), unquoted."""
    return json.dumps(text, ensure_ascii=False)[1:-1].replace("\u2028", "\\u2028").replace(
        "\u2029", "\\u2029").encode()


def synthetic_events(n: int, prefix: bytes = b"", suffix: bytes = b"") -> bytes:
    """The framed events of the first n tokens of one synthetic sequence, concatenated."""
    return b"".join(prefix + escaped(synthetic_token(i)) + suffix for i in range(n))


async def text_of(stream) -> bytes:
    """A one-choice lane stream's text, its chunks concatenated."""
    out = b""
    async for item in stream:
        if isinstance(item, Chunk):
            out += item.data
    return out


@pytest.fixture
def make_pool():
    pools = []

    def make(specs, deferred=(), **config) -> LanePool:
        cfg = PoolConfig(**{"heartbeat_timeout_s": 5.0, **config})
        pool = LanePool(specs, config=cfg, deferred=deferred)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()
        assert list_names(pid=os.getpid(), run_id=pool.run_id) == [], "shared-memory names leaked"


async def wait_for(predicate, timeout_s: float, what: str):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def unframe(data: bytes, prefix: bytes, suffix: bytes) -> bytes:
    """The escaped text inside a run of framed events, concatenated. The lane merges deltas of one
    request/choice in its backlog when the ring is full, so one event may carry several tokens:
    compare text, not event boundaries."""
    assert suffix, "needs a suffix to find the event boundaries"
    events = data.split(suffix)
    assert events[-1] == b"", f"trailing bytes outside an event: {events[-1][:80]!r}"
    out = []
    for event in events[:-1]:
        assert event.startswith(prefix), f"event without its prefix: {event[:80]!r}"
        out.append(event[len(prefix):])
    return b"".join(out)
