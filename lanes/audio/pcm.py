"""Decoded audio between gateway and audio lane: float32 mono 16 kHz samples in a POSIX
shared-memory segment per request, named like every other name of the run (lanes.names), so a
crashed server's segments are swept at the next start.

A transcription request carries up to ~100 MB of samples (25 min at 64 kB/s), far beyond a ring
record; one segment per request keeps the request ring's format and sizes untouched. The gateway
creates and fills it before submitting and unlinks it when the request ends; the lane maps it
read-only, copies nothing it does not need and never unlinks it.
"""
from __future__ import annotations

import mmap
import os

import numpy as np
import posix_ipc

from lanes.names import make_name

SAMPLE_RATE_HZ = 16_000
BYTES_PER_SAMPLE = 4


def segment_name(run_id: str, request_id: int) -> str:
    return make_name(run_id, "pcm", f"{request_id:x}")


def write_segment(name: str, samples: np.ndarray) -> None:
    """Create `name` holding `samples` (float32, 1-D, non-empty). Raises on an existing name."""
    data = np.ascontiguousarray(samples, dtype=np.float32)
    if data.ndim != 1 or data.size == 0:
        raise ValueError("samples must be a non-empty 1-D array")
    shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=data.nbytes)
    try:
        # Reserve the pages first: /dev/shm (tmpfs) may be small (Docker: 64 MiB), and writing
        # through a mapping past its free space is SIGBUS, while this is a plain ENOSPC OSError.
        os.posix_fallocate(shm.fd, 0, data.nbytes)
        with mmap.mmap(shm.fd, data.nbytes) as m:
            m.write(data.tobytes())
    except BaseException:
        shm.unlink()
        raise
    finally:
        shm.close_fd()


def unlink_segment(name: str) -> None:
    try:
        posix_ipc.unlink_shared_memory(name)
    except posix_ipc.ExistentialError:
        pass


def read_segment(name: str, num_samples: int) -> np.ndarray:
    """A private float32 copy of the segment's first num_samples samples."""
    shm = posix_ipc.SharedMemory(name, flags=0)
    try:
        size = os.fstat(shm.fd).st_size
        if size < num_samples * BYTES_PER_SAMPLE:
            raise ValueError(f"audio segment holds {size} bytes, fewer than {num_samples} samples")
        with mmap.mmap(shm.fd, num_samples * BYTES_PER_SAMPLE, prot=mmap.PROT_READ) as m:
            return np.frombuffer(m, dtype=np.float32, count=num_samples).copy()
    finally:
        shm.close_fd()
