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
import logging
from collections import deque

from lanes.api import ChoiceDone, Chunk, LaneError

log = logging.getLogger("laneserve.lanes")


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
        self._late_dones: list[ChoiceDone] = []  # arrived after cancel(): the work the lane did (accounting only)
        self._end_callbacks: list = []   # when_ended()
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
        so numbered events stay contiguous). Of what arrives later only the ChoiceDones are kept,
        for accounting (`unaccounted_dones`): the lane's cancel DONEs carry the work it did."""
        if self._cancelled:
            return
        self.next_number()  # the count stops here: later deltas are framed but never written
        # (it also keeps the relay's first send time: the route may be gone when accounting runs)
        self._cancelled = True
        self.detach_sink()
        if not self._ended:
            self._on_cancel(self.request_id)
        self._wake()

    @property
    def finished(self) -> bool:
        return self._ended

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def when_ended(self, callback) -> None:
        """callback() once no more items will arrive (the last ChoiceDone, or a failure); now if
        that already happened."""
        if self._ended:
            callback()
        else:
            self._end_callbacks.append(callback)

    def unaccounted_dones(self) -> list[ChoiceDone]:
        """After cancel(): the ChoiceDones no consumer took — still queued, or arrived since —
        handed out once (a consumer that stopped iterating never accounts them itself)."""
        if not self._cancelled:
            return []
        dones = [item for item in self._items if type(item) is ChoiceDone] + self._late_dones
        self._items = deque(item for item in self._items if type(item) is not ChoiceDone)
        self._late_dones = []
        return dones

    def next_number(self) -> int:
        """With a NumberedFraming (lanes.api): the number the request's next event would carry."""
        if self._route is not None and not self._cancelled:  # a count only grows; a gone route reads 0
            _, first_ns, number = self._route.route_stats(self.request_id)
            self._next_number = max(self._next_number, number)
            if first_ns and not self.first_direct_ns:
                self.first_direct_ns = first_ns
        return self._next_number

    def _end(self) -> None:
        self._ended = True
        callbacks, self._end_callbacks = self._end_callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a consumer's bug must not break the pump that delivered this
                log.exception("request %s: end callback failed", self.request_id)

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
        else:
            self._late_dones.append(done)  # not iterated: for unaccounted_dones()
        if last:
            self.next_number()  # the route goes with the request
            self._route = None
            self._end()
        self._wake()

    def fail(self, error: LaneError) -> None:
        if self._ended:
            return
        self.next_number()
        self._route = None
        self._error = error
        self._end()
        self._wake()
