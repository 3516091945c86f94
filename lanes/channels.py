"""One lane generation's IPC objects, created by the pool process: request ring (gateway →
lane) with its wake semaphore, output ring (lane → gateway) with its doorbell.

posix_ipc creates and unlinks the names; the `_ring` extension maps segments and does all index
work. Respawned lanes get fresh names (the generation number); the old ones are unlinked.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import posix_ipc

from lanes import _ring
from lanes.names import make_name
from lanes.wire import IMAGE_ENTRY, MAX_REQUEST_IMAGES


def request_ring_capacity(ctx_size: int, image_n_embd: int = 0) -> int:
    """Power of two whose max record (capacity/4) holds a full-context prompt plus framing; with
    image_n_embd (a vision projector's output width), every prompt position may be an image row of
    that many float32 (image positions are prompt positions, so ctx_size bounds them all), plus the
    largest image table."""
    image_bytes = ctx_size * image_n_embd * 4 + MAX_REQUEST_IMAGES * IMAGE_ENTRY.size + 4 if image_n_embd else 0
    need = 4 * (ctx_size * 4 + 65536 + image_bytes)
    cap = 65536
    while cap < need:
        cap *= 2
    return cap


def total_bytes(request_capacity: int, output_capacity: int) -> int:
    return _ring.segment_bytes_for(request_capacity) + _ring.segment_bytes_for(output_capacity)


@dataclass
class LaneChannels:
    request_name: str
    output_name: str
    wake_sem_name: str
    request_segment_bytes: int
    output_segment_bytes: int
    doorbell: str                       # "eventfd" | "semaphore"
    bell_fd: int = -1
    bell_sem_name: str = ""
    writer: object = None               # _ring.RingWriter on the request ring
    reader: object = None               # _ring.RingReader on the output ring
    bell_sem: object = None             # posix_ipc.Semaphore (semaphore doorbell)
    _created: list = field(default_factory=list)  # (kind, name) to unlink

    @classmethod
    def create(cls, run_id: str, label: str, request_capacity: int, output_capacity: int,
               doorbell: str) -> "LaneChannels":
        ch = cls(
            request_name=make_name(run_id, label, "req"),
            output_name=make_name(run_id, label, "out"),
            wake_sem_name=make_name(run_id, label, "wake"),
            request_segment_bytes=_ring.segment_bytes_for(request_capacity),
            output_segment_bytes=_ring.segment_bytes_for(output_capacity),
            doorbell=doorbell,
        )
        try:
            ch._make_semaphore(ch.wake_sem_name).close()  # C++ opens it by name
            if doorbell == "eventfd":
                ch.bell_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            else:
                ch.bell_sem_name = make_name(run_id, label, "bell")
                ch.bell_sem = ch._make_semaphore(ch.bell_sem_name)
            fd = ch._make_segment(ch.request_name, ch.request_segment_bytes)
            try:
                ch.writer = _ring.RingWriter(fd, ch.request_segment_bytes, "semaphore", -1, ch.wake_sem_name)
            finally:
                os.close(fd)
            fd = ch._make_segment(ch.output_name, ch.output_segment_bytes)
            try:
                ch.reader = _ring.RingReader(fd, ch.output_segment_bytes)
            finally:
                os.close(fd)
        except BaseException:
            ch.close()
            raise
        return ch

    def _make_semaphore(self, name: str):
        sem = posix_ipc.Semaphore(name, posix_ipc.O_CREX, mode=0o600, initial_value=0)
        self._created.append(("sem", name))
        return sem

    def _make_segment(self, name: str, size_bytes: int) -> int:
        shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=size_bytes)
        self._created.append(("shm", name))
        fd = os.dup(shm.fd)
        shm.close_fd()
        _ring.format_segment(fd, size_bytes)
        return fd

    def lane_spec(self) -> dict:
        """What the lane process needs to attach (JSON-serialisable)."""
        return {
            "request_name": self.request_name, "request_segment_bytes": self.request_segment_bytes,
            "output_name": self.output_name, "output_segment_bytes": self.output_segment_bytes,
            "wake_sem_name": self.wake_sem_name, "doorbell": self.doorbell,
            "bell_fd": self.bell_fd, "bell_sem_name": self.bell_sem_name,
        }

    def unlink(self) -> None:
        """Remove the names (the lane may still have them mapped; memory goes with the last map)."""
        for kind, name in self._created:
            try:
                (posix_ipc.unlink_semaphore if kind == "sem" else posix_ipc.unlink_shared_memory)(name)
            except posix_ipc.ExistentialError:
                pass
        self._created.clear()

    def close(self) -> None:
        """Unmap, close and unlink everything; idempotent."""
        self.writer = None
        self.reader = None
        if self.bell_sem is not None:
            self.bell_sem.close()
            self.bell_sem = None
        if self.bell_fd >= 0:
            os.close(self.bell_fd)
            self.bell_fd = -1
        self.unlink()
