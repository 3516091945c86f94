"""SemaphoreWaiter: the gateway's side of a lane whose doorbell is a POSIX semaphore (no eventfd to
hand to the event loop): a thread blocks on the semaphore and asks the loop for a ring drain.

A drain already scheduled is enough for any number of rings of the bell, so the thread only calls
into the loop when `scheduled()` is false. The thread wakes every 100 ms to notice `stop()`."""
from __future__ import annotations

import threading
from typing import Callable

import posix_ipc


class SemaphoreWaiter:
    def __init__(self, sem, loop, schedule: Callable[[], None], scheduled: Callable[[], bool], name: str) -> None:
        self._sem, self._loop = sem, loop
        self._schedule, self._scheduled = schedule, scheduled
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sem.acquire(0.1)  # releases the GIL
            except (posix_ipc.BusyError, posix_ipc.SignalError):
                continue
            if not self._scheduled() and not self._stop.is_set():
                try:
                    self._loop.call_soon_threadsafe(self._schedule)
                except RuntimeError:  # loop closed
                    return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1.0)  # acquire() times out every 100 ms
