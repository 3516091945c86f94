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


class ModelLoadFailed(Exception):
    """The model's lanes could not be loaded: every request waiting for them ends with this."""

    def __init__(self, model: str, reason: str) -> None:
        super().__init__(f"model {model!r} could not be loaded: {reason}")
        self.model = model
        self.reason = reason


class AdmissionAborted(Exception):
    """The request was cancelled (its `abort` future completed) while it waited in the queue."""


class _Waiter:
    """One queued request: the future its wait ends on (replaced after each wake-up that found
    no slot) and when it joined the queue."""
    __slots__ = ("future", "since_s")

    def __init__(self, future: asyncio.Future, since_s: float) -> None:
        self.future = future
        self.since_s = since_s


class AdmissionQueue:
    def __init__(self, max_queue: int, timeout_s: float, on_wait: Callable[[str, float], None] | None = None,
                 serving: Callable[[str], bool] | None = None,
                 accepting: Callable[[str, float], bool] | None = None):
        self._serving = serving  # model → has a replica that can take requests (else: no queueing)
        # (model, when the request arrived) → may it take a slot now; False keeps it queued until
        # the next notify (gateway.server.residency: a model being unloaded or not loaded yet).
        self._accepting = accepting
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self._on_wait = on_wait  # (model, seconds queued) for admitted requests that waited
        self._queues: dict[str, deque[_Waiter]] = {}

    def depth(self, model: str) -> int:
        return len(self._queues.get(model, ()))

    def depth_before(self, model: str, since_s: float) -> int:
        """Requests of the model queued since before `since_s` (time.monotonic())."""
        return sum(1 for w in self._queues.get(model, ()) if w.since_s < since_s)

    def depths(self) -> dict[str, int]:
        return {model: len(q) for model, q in self._queues.items()}

    def notify(self, model: str) -> None:
        q = self._queues.get(model)
        if q:
            head = q[0].future
            if not head.done():
                head.set_result(None)

    def fail(self, model: str, exc: Exception) -> None:
        """Every request queued for the model ends with `exc` (its model could not be loaded)."""
        for waiter in self._queues.get(model, ()):
            if not waiter.future.done():
                waiter.future.set_exception(exc)

    def _may_submit(self, model: str, since_s: float) -> bool:
        return self._accepting is None or self._accepting(model, since_s)

    async def admit(self, model: str, try_submit: Callable[[], T], abort: asyncio.Future | None = None) -> T:
        """`try_submit()` starts the request or raises LaneBusy (no free slot). Returns its
        result; raises QueueFull, QueueTimeout, AdmissionAborted (`abort` completed while
        queued), the exception `fail()` gave (model not loadable) or CancelledError (client gone)."""
        q = self._queues.setdefault(model, deque())
        start_s = time.monotonic()
        if not q and self._may_submit(model, start_s):
            try:
                return try_submit()
            except LaneBusy:
                pass
        if self._serving is not None and not self._serving(model):
            raise NoServingLane()
        if len(q) >= self.max_queue:
            raise QueueFull()
        loop = asyncio.get_running_loop()
        deadline_s = start_s + self.timeout_s
        waiter = _Waiter(loop.create_future(), start_s)
        q.append(waiter)
        try:
            while True:
                remaining_s = deadline_s - time.monotonic()
                if remaining_s <= 0:
                    raise QueueTimeout()
                entry = waiter.future
                # asyncio.wait never cancels what it waits on: the entry stays ours to remove.
                await asyncio.wait((entry,) if abort is None else (entry, abort), timeout=remaining_s,
                                   return_when=asyncio.FIRST_COMPLETED)
                if abort is not None and abort.done():
                    raise AdmissionAborted()
                if not entry.done():
                    raise QueueTimeout()
                if entry.exception() is not None:
                    raise entry.exception()
                # Woken at the head of the queue: try; on LaneBusy wait for the next notify.
                try:
                    if not self._may_submit(model, start_s):
                        raise LaneBusy("not admitting yet")
                    result = try_submit()
                except LaneBusy:
                    waiter.future = loop.create_future()
                    continue
                if self._on_wait is not None:
                    self._on_wait(model, time.monotonic() - start_s)
                return result
        finally:
            was_head = bool(q) and q[0] is waiter
            try:
                q.remove(waiter)
            except ValueError:
                pass
            if waiter.future.done() and not waiter.future.cancelled():
                waiter.future.exception()  # retrieved: a failure nobody waits for any more is no warning
            if was_head and q:
                # The next one may have a slot now (we took one, or we left without taking one).
                self.notify(model)
