"""Admission: a model's capacity is its replicas × sequence slots; beyond it a bounded FIFO queue
per model (max_queue, each wait bounded by queue_timeout_s); beyond the queue the caller answers
429 server_busy with Retry-After.

The pool calls `notify(model)` whenever a request ends or a replica becomes ready; the head of
that model's queue then retries. A waiter whose client disconnects (its task is cancelled), or
whose `abort` future completes (gateway.serve.control: POST /stop, DELETE /v1/requests/{id}), leaves
the queue at once and never reaches a lane; if it had been woken, the wake-up passes on.
Single-threaded: everything runs on the serving event loop.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Callable, TypeVar

from gateway.serve.lanes import LaneBusy

T = TypeVar("T")


class QueueFull(Exception):
    """Every slot is taken and the model's queue holds max_queue requests."""


class QueueTimeout(Exception):
    """A queued request waited queue_timeout_s without getting a slot."""


class NoServingLane(QueueFull):
    """No replica of the model can serve right now (loading, restarting, failed): answered at
    once (503 + Retry-After) instead of queueing behind a restart of unknown length."""


class AdmissionAborted(Exception):
    """The request was cancelled (its `abort` future completed) while it waited in the queue."""


class AdmissionQueue:
    def __init__(self, max_queue: int, timeout_s: float, on_wait: Callable[[str, float], None] | None = None,
                 serving: Callable[[str], bool] | None = None):
        self._serving = serving  # model → has a replica that can take requests (else: no queueing)
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self._on_wait = on_wait  # (model, seconds queued) for admitted requests that waited
        self._queues: dict[str, deque[asyncio.Future]] = {}

    def depth(self, model: str) -> int:
        return len(self._queues.get(model, ()))

    def depths(self) -> dict[str, int]:
        return {model: len(q) for model, q in self._queues.items()}

    def notify(self, model: str) -> None:
        q = self._queues.get(model)
        if q:
            head = q[0]
            if not head.done():
                head.set_result(None)

    async def admit(self, model: str, try_submit: Callable[[], T], abort: asyncio.Future | None = None) -> T:
        """`try_submit()` starts the request or raises LaneBusy (no free slot). Returns its
        result; raises QueueFull, QueueTimeout, AdmissionAborted (`abort` completed while
        queued) or CancelledError (client gone) otherwise."""
        q = self._queues.setdefault(model, deque())
        if not q:
            try:
                return try_submit()
            except LaneBusy:
                pass
        if self._serving is not None and not self._serving(model):
            raise NoServingLane()
        if len(q) >= self.max_queue:
            raise QueueFull()
        loop = asyncio.get_running_loop()
        start_s = time.monotonic()
        deadline_s = start_s + self.timeout_s
        entry = loop.create_future()
        q.append(entry)
        try:
            while True:
                remaining_s = deadline_s - time.monotonic()
                if remaining_s <= 0:
                    raise QueueTimeout()
                # asyncio.wait never cancels what it waits on: the entry stays ours to remove.
                await asyncio.wait((entry,) if abort is None else (entry, abort), timeout=remaining_s,
                                   return_when=asyncio.FIRST_COMPLETED)
                if abort is not None and abort.done():
                    raise AdmissionAborted()
                if not entry.done():
                    raise QueueTimeout()
                # Woken at the head of the queue: try; on LaneBusy wait for the next notify.
                try:
                    result = try_submit()
                except LaneBusy:
                    new_entry = loop.create_future()
                    q[q.index(entry)] = new_entry
                    entry = new_entry
                    continue
                if self._on_wait is not None:
                    self._on_wait(model, time.monotonic() - start_s)
                return result
        finally:
            was_head = bool(q) and q[0] is entry
            try:
                q.remove(entry)
            except ValueError:
                pass
            if was_head and q:
                # The next one may have a slot now (we took one, or we left without taking one).
                self.notify(model)
