"""Fixtures: fresh ring segments in /dev/shm, unlinked afterwards."""
import os
import secrets

import posix_ipc
import pytest

from lanes import _ring


class Segment:
    def __init__(self, capacity_bytes: int):
        self.name = f"/laneserve-{os.getpid()}-{secrets.token_hex(4)}-test"
        self.size_bytes = _ring.segment_bytes_for(capacity_bytes)
        shm = posix_ipc.SharedMemory(self.name, posix_ipc.O_CREX, size=self.size_bytes)
        self.fd = os.dup(shm.fd)
        shm.close_fd()
        _ring.format_segment(self.fd, self.size_bytes)

    def close(self):
        os.close(self.fd)
        posix_ipc.unlink_shared_memory(self.name)


@pytest.fixture
def make_segment():
    made = []

    def make(capacity_bytes: int = 4096) -> Segment:
        seg = Segment(capacity_bytes)
        made.append(seg)
        return seg

    yield make
    for seg in made:
        seg.close()
