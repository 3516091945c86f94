"""The audio lane's serve loop turns a signal into its threads' stop event outside the handler (whose only
work is a lock-free flag, lanes/lane_process.py StopRequest)."""
import os
import signal
import threading

from lanes.audio.lane_process import _serve
from lanes.lane_process import StopRequest


class _Quiet:
    """A request ring with nothing in it, a wake semaphore that times out, an output and a worker."""

    beats = 0
    woken = False

    def read_batch(self, n):
        return []

    def arm(self):
        return False

    def acquire(self, timeout):
        pass

    def heartbeat(self):
        self.beats += 1

    def wake(self):
        self.woken = True


def test_a_signal_stops_the_serve_loop_and_wakes_the_worker():
    parts, stop, signals = _Quiet(), threading.Event(), StopRequest()
    signals.on_signal(signal.SIGTERM, None)
    _serve(parts, parts, parts, parts, stop, signals, os.getppid())
    assert stop.is_set() and parts.woken and parts.beats == 1
