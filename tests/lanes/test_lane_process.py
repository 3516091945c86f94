"""The lane process shim: signals stop the native loop promptly (the GIL is free), and a lane
that exits is noticed and replaced by the pool."""
import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import lanes

from lanes.api import GenerationParams, LaneModelSpec

from .conftest import wait_for


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_signal_stops_a_generating_lane_promptly(make_pool, sig):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=2000")], backoff_initial_s=0.05)
    pool.start()
    pool.attach(asyncio.get_running_loop())
    replica = pool._replicas["syn"][0]
    proc, pid = replica.proc, replica.pid
    stream = pool.submit("syn", [1], GenerationParams(max_tokens=100_000), 1, framings=[(0, 0, b"", b"|")])
    await stream.__anext__()
    t0 = time.monotonic()
    os.kill(pid, sig)
    await wait_for(lambda: _gone(pid), 1.0, "lane exit")
    assert time.monotonic() - t0 < 0.5
    assert proc.returncode in (0, None)  # clean exit through the stop flag, not a signal death
    await wait_for(lambda: pool.statuses()[0].state == "ready", 10, "replacement lane")
    assert pool.statuses()[0].restarts == 1


def test_lane_refuses_to_run_without_its_parent():
    from lanes.lane_process import EXIT_PARENT_GONE
    # Where the lanes package under test lives (installed or in-place build), not the checkout.
    root = os.path.dirname(os.path.dirname(os.path.abspath(lanes.__file__)))
    p = subprocess.run([sys.executable, "-m", "lanes.lane_process", json.dumps({"parent_pid": 1})],
                       env={**os.environ, "PYTHONPATH": root}, timeout=30)
    assert p.returncode == EXIT_PARENT_GONE
