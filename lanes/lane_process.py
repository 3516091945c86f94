"""Entry point of a lane process: `python -m lanes.lane_process '<json config>'`.

Started by the pool with exec (a fresh interpreter: nothing inherited from a parent that may run
native threads), in its own process group so a terminal's Ctrl-C reaches only the gateway, which
then shuts lanes down through the ring. Sequence: parent-death signal + parent check → signal
handlers → attach rings → native thread loads the model, sends HELLO, runs the loop with the GIL
released → main thread polls a stop flag so SIGTERM/SIGINT stay responsive.

The signal handler takes no lock: Python runs it in the main thread between bytecodes, so a handler
that set a threading.Event could re-enter while an earlier handler held the Event's lock (a burst of
SIGTERMs: the parent-death signal and the pool's terminate) and wait on itself forever.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading

import posix_ipc

EXIT_OK = 0
EXIT_LOAD_FAILED = 3
EXIT_PARENT_GONE = 4
EXIT_STUCK = 5
PR_SET_PDEATHSIG = 1
STOP_JOIN_TIMEOUT_S = 5.0  # a stop mid-load or mid-prefill: wait this long, then exit hard


def set_parent_death_signal(sig: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


class StopRequest:
    """SIGTERM / SIGINT → stop the native loop. on_signal only stores a flag and calls the native
    stop (an atomic store), so any number of nested or repeated signals return at once."""

    def __init__(self) -> None:
        self.requested = False
        self.lane = None

    def on_signal(self, signum, frame) -> None:
        self.requested = True
        if self.lane is not None:
            self.lane.stop()

    def wait_for(self, thread: threading.Thread, parent_pid: int, poll_s: float = 0.25) -> bool:
        """Waits until the thread ends; on a stop request or the parent's death stops the lane first and
        gives the thread STOP_JOIN_TIMEOUT_S. False when it is still running after that."""
        while thread.is_alive():
            if self.requested or os.getppid() != parent_pid:
                if self.lane is not None:
                    self.lane.stop()
                thread.join(STOP_JOIN_TIMEOUT_S)
                return not thread.is_alive()
            thread.join(poll_s)
        return True


def _open_fd(name: str) -> int:
    shm = posix_ipc.SharedMemory(name)
    fd = os.dup(shm.fd)
    shm.close_fd()
    return fd


def run(config: dict) -> int:
    parent_pid = config["parent_pid"]
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        return EXIT_PARENT_GONE

    from lanes import _runtime, grammar  # after the parent check: importing the runtime takes a while

    grammar.defer()  # grammar-constrained decoding (llguidance, when installed) on first use

    stop = StopRequest()
    signal.signal(signal.SIGTERM, stop.on_signal)
    signal.signal(signal.SIGINT, stop.on_signal)

    ch = config["channels"]
    request_fd, output_fd = _open_fd(ch["request_name"]), _open_fd(ch["output_name"])
    try:
        lane = _runtime.Lane(
            request_fd=request_fd, request_segment_bytes=ch["request_segment_bytes"],
            output_fd=output_fd, output_segment_bytes=ch["output_segment_bytes"],
            wake_semaphore=ch["wake_sem_name"], output_bell_kind=ch["doorbell"],
            output_bell_fd=ch["bell_fd"], output_bell_name=ch["bell_sem_name"],
            expected_ppid=parent_pid, max_pending_bytes=config["max_pending_bytes"],
            prefill_budget_ns_per_token=config["prefill_budget_ns_per_token"])
    finally:
        os.close(request_fd)  # the mappings stay valid
        os.close(output_fd)
    stop.lane = lane
    if stop.requested:
        lane.stop()
        return EXIT_OK

    result: dict = {}
    thread = threading.Thread(
        target=lambda: result.setdefault("reason", lane.load_and_run(
            config["path"], config["threads"], config["ctx_size"], config["num_slots"], config["max_batch_tokens"],
            config["repack_cache_dir"], [tuple(a) for a in config.get("adapters", ())],
            config.get("prompt_cache_mib", 0), config.get("kv_cache_mib", 0), config.get("prefix_cache_dir", ""),
            config.get("prefix_cache_disk_mib", 4096))),
        name="lane-native", daemon=True)
    thread.start()
    if not stop.wait_for(thread, parent_pid):
        return EXIT_STUCK
    reason = result.get("reason", "stopped")
    return {"load_failed": EXIT_LOAD_FAILED, "parent_died": EXIT_PARENT_GONE}.get(reason, EXIT_OK)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv if argv is None else argv
    code = run(json.loads(argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: a daemon thread still inside a native call must not block interpreter shutdown.
    os._exit(code)


if __name__ == "__main__":
    main()
