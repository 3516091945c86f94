"""RequestStream: what `LanePool.submit` returns; the pump pushes into it, a handler iterates it.

Items are `Chunk`s (framed events of one choice, merged while the consumer lags, so one HTTP send
can carry many tokens), `ScoredChunk`s (requests with logprobs: text and its scores, framed by
the consumer), `Embedding`s (embedding requests, before their choice's ChoiceDone) and
`ChoiceDone`s; a lane failure raises LaneError from the iteration.

A consumer that owns a socket attaches a *sink* (`attach_sink(fd)`) and tells the stream when
the socket is free for the pump (`set_direct(True)`: nothing of its own is pending on it). While
direct, the lane's deltas go from the ring to the socket natively (lanes._ring DeltaRelay) and
only ChoiceDone / errors come through here. The pump turns direct off itself when the socket
does not take a whole batch, and hands the unsent tail to `on_partial(unsent, send_errno)`,
which the consumer must write before anything else.
"""
from __future__ import annotations

import asyncio
from collections import deque

from lanes.api import ChoiceDone, Chunk, LaneError


class RequestStream:
    def __init__(self, request_id: int, num_choices: int, route, on_cancel):
        self.request_id = request_id
        self.num_choices = num_choices
        self._route = route              # the replica's native route controls (or None once over)
        self._items: deque = deque()     # [choice, [bytes, ...]] lists (mergeable) or ChoiceDone
        self._waiter: asyncio.Future | None = None
        self._ended = False              # no more items will arrive
        self._error: LaneError | None = None
        self._cancelled = False
        self._on_cancel = on_cancel
        self.on_partial = None           # sink callback for an unsent direct tail
        self.first_direct_ns = 0         # CLOCK_MONOTONIC of the first natively sent delta
        self._next_number = 0            # NumberedFraming's count, kept when the route goes
        # False: a consumer that only wants the whole text (non-stream responses) is woken by
        # ChoiceDone and errors only.
        self.wake_on_chunks = True

    # --- sink (consumer side) -------------------------------------------------------------
    def attach_sink(self, fd: int, on_partial) -> None:
        if self._cancelled:  # cancelled from outside the consumer (gateway.serve.control): never again
            return
        self.on_partial = on_partial
        if self._route is not None:
            self._route.set_socket(self.request_id, fd)

    def detach_sink(self) -> None:
        """Before the sink's fd is closed: the pump must never write to it again."""
        if self._route is not None:
            self._route.set_socket(self.request_id, -1)
        self.on_partial = None

    def set_direct(self, on: bool) -> None:
        if self._route is not None and not self._cancelled:
            self._route.set_direct(self.request_id, on and not self._items)

    # --- consumer side -------------------------------------------------------------------
    def __aiter__(self):
        return self

    async def __anext__(self):
        while True:
            if self._items:
                item = self._items.popleft()
                if isinstance(item, list):
                    parts = item[1]
                    return Chunk(item[0], parts[0] if len(parts) == 1 else b"".join(parts))
                return item
            if self._cancelled:
                raise StopAsyncIteration
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
        """Idempotent. The lane frees the request's slots at its next step; iteration ends after
        the items already received (a consumer still writing gets every event the relay counted,
        so numbered events stay contiguous), and nothing that arrives later is kept."""
        if self._cancelled:
            return
        self.next_number()  # the count stops here: later deltas are framed but never written
        self._cancelled = True
        self.detach_sink()
        if not self._ended:
            self._on_cancel(self.request_id)
        self._wake()

    @property
    def finished(self) -> bool:
        return self._ended

    def next_number(self) -> int:
        """With a NumberedFraming (lanes.api): the number the request's next event would carry."""
        if self._route is not None and not self._cancelled:  # a count only grows; a gone route reads 0
            self._next_number = max(self._next_number, self._route.route_stats(self.request_id)[2])
        return self._next_number

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

    def push_partial(self, unsent: bytes | None, send_errno: int) -> None:
        if self.on_partial is not None and not self._cancelled:
            self.on_partial(unsent, send_errno)

    def push_item(self, item) -> None:
        """An item the consumer handles itself (lanes.api.ScoredChunk): never merged."""
        if self._cancelled:
            return
        self._items.append(item)
        if self.wake_on_chunks:
            self._wake()

    def push_embedding(self, embedding) -> None:
        if not self._cancelled:
            self._items.append(embedding)  # its ChoiceDone follows and wakes the consumer

    push_transcript = push_embedding  # TranscriptPart: likewise, the ChoiceDone wakes the consumer

    def push_done(self, done: ChoiceDone, last: bool) -> None:
        if not self._cancelled:
            self._items.append(done)
        if last:
            self._ended = True
            self.next_number()  # the route goes with the request
            self._route = None
        self._wake()

    def fail(self, error: LaneError) -> None:
        if self._ended:
            return
        self._ended = True
        self.next_number()
        self._route = None
        self._error = error
        self._wake()
