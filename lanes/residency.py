"""Loading and unloading one model's lanes in a running, attached pool (models served on demand).

`load_model` spawns the model's replicas and waits for every handshake; a lane that exits before
its handshake fails the whole load at once (LaneStartupError with the lane's own message) and
nothing is retried: the caller decides when to try again. `unload_model` stops the replicas
(SHUTDOWN record, SIGTERM while still loading, SIGKILL after the pool's shutdown grace) and waits
until each process is gone and its rings are unlinked: the model's memory is returned. Both run
on the pool's event loop; the pool spawns deferred models' lanes only through here.
"""
from __future__ import annotations

import asyncio
import os
import time

from lanes import wire
from lanes.api import SERVING_STATES, LaneError, LaneStartupError

POLL_S = 0.005  # handshake and exit checks while waiting (the pool's own startup wait polls alike)
KILL_WAIT_S = 5.0  # after SIGKILL: the exit is reported within milliseconds; this only bounds the wait
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


async def load_model(pool, model: str) -> None:
    """Spawn `model`'s stopped replicas and wait until every one serves; LaneStartupError (all
    stopped again) when one fails to load or the pool's startup timeout passes."""
    replicas = pool.replicas_of(model)
    try:
        for replica in replicas:
            if replica.proc is None:
                replica.cancel_timers()
                replica.load_failures = 0
                replica.backoff_s = pool.config.backoff_initial_s
                replica.spawn()
    except Exception as exc:  # e.g. /dev/shm full
        await unload_model(pool, model)
        raise LaneStartupError(f"lane startup failed: {exc}") from exc
    deadline_s = time.monotonic() + pool.config.startup_timeout_s
    while not all(r.state in SERVING_STATES for r in replicas):
        # A lane that exited before its handshake is "restarting" (or "failed") and stopped here.
        failed = [r for r in replicas if r.state in ("restarting", "failed", "stopped")]
        if failed or pool.closing or time.monotonic() > deadline_s:
            reasons = [f"lane {r.name} could not load {r.spec.path!r}: {r.last_error or 'it exited'}"
                       for r in failed] or [f"{model!r} did not load within {pool.config.startup_timeout_s:g} s"]
            await unload_model(pool, model)
            raise LaneStartupError("; ".join(reasons))
        await asyncio.sleep(POLL_S)


async def unload_model(pool, model: str) -> None:
    """Stop every replica of `model` and wait until each process is gone (pidfd → teardown)."""
    replicas = pool.replicas_of(model)
    for replica in replicas:
        replica.cancel_timers()
        proc = replica.proc
        if proc is None or proc.poll() is not None:
            continue
        replica.unloading = True
        if replica.hello is not None and replica.channels is not None:
            replica.channels.writer.write(wire.SHUTDOWN, b"")
        else:  # still loading: it reads no ring yet; SIGTERM stops it after the load
            proc.terminate()
    deadline_s = time.monotonic() + pool.config.shutdown_grace_s
    killed = False
    while any(r.proc is not None for r in replicas):
        if time.monotonic() > deadline_s:
            if killed:
                raise LaneError("unload_failed", f"the lanes of {model!r} did not exit after SIGKILL")
            for replica in replicas:
                replica.kill("unload")  # the pidfd still reports the exit: teardown follows
            killed, deadline_s = True, time.monotonic() + KILL_WAIT_S
        await asyncio.sleep(POLL_S)
    for replica in replicas:
        replica.unloading = False
        replica.state = "stopped"  # also after a failed load ("restarting", "failed")


def resident_bytes(pool, model: str) -> int:
    """Memory the model's lane processes hold now (their RSS, summed; 0 when unloaded)."""
    total = 0
    for replica in pool.replicas_of(model):
        if replica.pid is None:
            continue
        try:
            with open(f"/proc/{replica.pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * _PAGE_BYTES
        except (OSError, ValueError, IndexError):
            pass
    return total
