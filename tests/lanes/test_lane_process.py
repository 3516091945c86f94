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


_SIGNAL_BURST = r"""
import os, signal, sys, threading, time
from lanes.lane_process import StopRequest

class FakeLane:  # the native Lane.stop is an atomic store; this counts the calls instead
    stops = 0
    def stop(self):
        self.stops += 1

lane = FakeLane()
stop = StopRequest()
stop.lane = lane
signal.signal(signal.SIGTERM, stop.on_signal)
signal.signal(signal.SIGINT, stop.on_signal)
done = []
def burst():  # the worker (a busy native loop) outlives the burst, so every signal lands in the wait
    for i in range(3000):
        os.kill(os.getpid(), signal.SIGTERM if i % 2 else signal.SIGINT)
    done.append(True)
worker = threading.Thread(target=lambda: [time.sleep(0.001) for _ in iter(lambda: bool(done), True)], daemon=True)
worker.start()
threading.Thread(target=burst, daemon=True).start()
ok = stop.wait_for(worker, os.getppid(), poll_s=0.001)
print("stopped", ok, stop.requested, lane.stops >= 1)
"""


def test_a_burst_of_signals_never_hangs_the_stop():
    """SIGTERM and SIGINT in a burst (the parent-death signal and the pool's terminate arrive together) while
    the main thread waits: the handler takes no lock, so nested handlers cannot wait on each other (a handler
    that set a threading.Event once left an orphaned lane blocked forever)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(lanes.__file__)))
    for _ in range(3):
        p = subprocess.run([sys.executable, "-c", _SIGNAL_BURST], env={**os.environ, "PYTHONPATH": root},
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert p.stdout.split() == ["stopped", "True", "True", "True"]


def test_the_stop_handler_is_reentrant():
    """A signal arriving while the handler runs re-enters it (Python runs handlers between bytecodes): here the
    fake lane's stop raises the nested call itself, deterministically; a handler that took a lock would wait
    on itself forever."""
    from lanes.lane_process import StopRequest

    stop = StopRequest()

    class NestingLane:
        depth = 0

        def stop(self):
            self.depth += 1
            if self.depth < 5:
                stop.on_signal(signal.SIGTERM, None)

    stop.lane = NestingLane()
    stop.on_signal(signal.SIGTERM, None)
    assert stop.requested and stop.lane.depth == 5
