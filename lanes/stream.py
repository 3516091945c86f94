"""RequestStream: what `LanePool.submit` returns; the pump pushes into it, a handler iterates it.

Consecutive chunks of one choice merge while the consumer lags, so one HTTP send can carry many
tokens (the lane does the same when its output ring is full).

A consumer that owns a socket can attach a *sink*; while `sink.ready()` and nothing is queued
here, the pump sends the lane's deltas straight from the ring to `sink.fd` (RingReader.relay)
and only control items (ChoiceDone, errors) come through this stream. The sink protocol:
`fd` (int), `ready() -> bool` (no bytes of its own are pending ahead of ours),
`relayed(num_deltas, unsent, send_errno)` (called after each direct batch: `unsent` are bytes the
socket did not take, to be written by the sink before anything else).
"""
from __future__ import annotations

import asyncio
from collections import deque

from lanes.api import ChoiceDone, Chunk, LaneError


class RequestStream:
    def __init__(self, request_id: int, num_choices: int, on_cancel):
        self.request_id = request_id
        self.num_choices = num_choices
        self._items: deque = deque()     # [choice, [bytes, ...]] lists (mergeable) or ChoiceDone
        self._waiter: asyncio.Future | None = None
        self._ended = False              # no more items will arrive
        self._error: LaneError | None = None
        self._cancelled = False
        self._on_cancel = on_cancel
        self.sink = None
        # False: a consumer that only wants the whole text (non-stream responses) is woken by
        # ChoiceDone and errors only; chunks accumulate (merged) meanwhile, so no handler step
        # runs per token.
        self.wake_on_chunks = True

    @property
    def direct_ready(self) -> bool:
        """The pump may bypass this stream: a sink is attached and nothing is queued ahead."""
        sink = self.sink
        return sink is not None and not self._items and sink.ready()

    # --- consumer side -------------------------------------------------------------------
    def __aiter__(self):
        return self

    async def __anext__(self):
        while True:
            if self._cancelled:
                raise StopAsyncIteration
            if self._items:
                item = self._items.popleft()
                if isinstance(item, list):
                    parts = item[1]
                    return Chunk(item[0], parts[0] if len(parts) == 1 else b"".join(parts))
                return item
            if self._error is not None:
                raise self._error
            if self._ended:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def cancel(self) -> None:
        """Idempotent. The lane stops within one token and is freed; iteration ends now."""
        if self._cancelled:
            return
        self._cancelled = True
        self._items.clear()
        if not self._ended:
            self._on_cancel(self.request_id)
        self._wake()

    @property
    def finished(self) -> bool:
        return self._ended

    # --- pump side -----------------------------------------------------------------------
    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def push_chunk(self, choice: int, data: bytes) -> None:
        if self._cancelled:
            return
        items = self._items
        if items:
            last = items[-1]
            if isinstance(last, list) and last[0] == choice:
                last[1].append(data)
                return
        items.append([choice, [data]])
        if self.wake_on_chunks:
            self._wake()

    def push_done(self, done: ChoiceDone, last: bool) -> None:
        if not self._cancelled:
            self._items.append(done)
        if last:
            self._ended = True
        self._wake()

    def fail(self, error: LaneError) -> None:
        if self._ended:
            return
        self._ended = True
        self._error = error
        self._wake()
