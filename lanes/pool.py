"""LanePool: the gateway-owned supervisor of all lane processes (one per model replica).

Lifecycle: `start()` (sync: every lane loaded and handshaken, else LaneStartupError with all
cleaned up) → `attach(loop)` (pump + death/hang watch on that loop) → `submit()` … →
`drain()` → `close()`. The pool lives in ONE process; every method after attach runs on that
loop's thread. Lanes are children of that process (they die with it: PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import asyncio
import atexit
import dataclasses
import logging
import time

from lanes import wire
from lanes.api import (ChoiceDone, Chunk, Framing, GenerationParams, LaneBusy, LaneError, LaneModelSpec,
                       LaneStartupError, LaneStatus)
from lanes.channels import request_ring_capacity, total_bytes
from lanes.config import PoolConfig, config_from_env
from lanes.names import ShmSpaceError, check_free_space, new_run_id, sweep_stale, unlink_run
from lanes.slot import LaneSlot
from lanes.stream import RequestStream

__all__ = ["LanePool", "LaneModelSpec", "Framing", "GenerationParams", "Chunk", "ChoiceDone", "LaneBusy",
           "LaneError", "LaneStartupError", "LaneStatus", "RequestStream", "PoolConfig"]

log = logging.getLogger("laneserve.lanes")
HEALTH_PERIOD_S = 0.1
SHM_HEADROOM = 1.25  # rings of respawned lanes overlap briefly with the old ones' unlinked memory


class LanePool:
    def __init__(self, specs: list[LaneModelSpec], *, heartbeat_timeout_s: float = 5.0,
                 config: PoolConfig | None = None):
        if not specs:
            raise ValueError("LanePool needs at least one LaneModelSpec")
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate model names in {names}")
        if config is None:
            config = config_from_env(heartbeat_timeout_s=heartbeat_timeout_s)
        elif heartbeat_timeout_s != 5.0:
            config = dataclasses.replace(config, heartbeat_timeout_s=heartbeat_timeout_s)
        self.config = config
        self.specs = list(specs)
        self.run_id = new_run_id()
        self.closing = False
        self._draining = False
        self._started = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._health_timer = None
        self._slots: dict[str, list[LaneSlot]] = {
            spec.name: [LaneSlot(self, spec, mi, r) for r in range(spec.replicas)]
            for mi, spec in enumerate(self.specs)}
        self._next: dict[str, int] = {name: 0 for name in names}

    def _all_slots(self) -> list[LaneSlot]:
        return [s for slots in self._slots.values() for s in slots]

    # --- startup ------------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            raise RuntimeError("LanePool.start() called twice")
        self._started = True
        atexit.register(self.close)
        try:
            swept = sweep_stale(self.config.shm_dir)
            if swept:
                log.warning("removed %d stale shared-memory names of dead runs", len(swept))
            need = sum(total_bytes(request_ring_capacity(s.ctx_size), self.config.output_ring_bytes) * s.replicas
                       for s in self.specs)
            check_free_space(int(need * SHM_HEADROOM), self.config.shm_dir)
            for slot in self._all_slots():
                slot.spawn()
            self._wait_ready()
        except ShmSpaceError as e:
            self.close()
            raise LaneStartupError(str(e)) from None
        except LaneStartupError:
            self.close()
            raise
        except BaseException as e:
            self.close()
            raise LaneStartupError(f"lane startup failed: {e}") from e

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        pending = self._all_slots()
        failures = []
        while pending:
            still = []
            for slot in pending:
                result = slot.poll_startup()
                if result == "failed":
                    failures.append(f"lane {slot.name} could not load {slot.spec.path!r}: {slot.last_error}")
                elif result is None:
                    still.append(slot)
            if failures:
                break
            if still and time.monotonic() > deadline:
                failures += [f"lane {s.name} did not finish loading {s.spec.path!r} within "
                             f"{self.config.startup_timeout_s} s" for s in still]
                break
            pending = still
            if pending:
                time.sleep(0.005)
        if failures:
            raise LaneStartupError("; ".join(failures))

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._started or self.closing:
            raise RuntimeError("attach() needs a started, open pool")
        self._loop = loop
        for slot in self._all_slots():
            slot.attach(loop)
        self._health_timer = loop.call_later(HEALTH_PERIOD_S, self._health_tick)

    def _health_tick(self) -> None:
        if self.closing:
            return
        now = time.monotonic_ns()
        for slot in self._all_slots():
            slot.check_health(now)
        self._health_timer = self._loop.call_later(HEALTH_PERIOD_S, self._health_tick)

    # --- queries ------------------------------------------------------------------------------
    def model_names(self) -> list[str]:
        return [s.name for s in self.specs]

    def lane_info(self, model: str) -> dict:
        for slot in self._slots[model]:
            if slot.hello is not None:
                return {"n_ctx": slot.hello.n_ctx, "n_vocab": slot.hello.n_vocab}
        raise LaneError("no_lane", f"no lane of model {model!r} has completed its handshake")

    def statuses(self) -> list[LaneStatus]:
        return [LaneStatus(s.spec.name, s.index, s.state, s.pid, s.restarts) for s in self._all_slots()]

    # --- requests -----------------------------------------------------------------------------
    def submit(self, model: str, prompt_ids: list[int], params: GenerationParams, framings: list[Framing],
               request_id: int) -> RequestStream:
        slots = self._slots[model]  # KeyError for an unknown model
        if self._loop is None:
            raise RuntimeError("submit() before attach()")
        if self._draining or self.closing:
            raise LaneBusy("the server is shutting down")
        if not framings:
            raise ValueError("at least one Framing (one per choice) is required")
        if not prompt_ids:
            raise ValueError("prompt_ids must be non-empty")
        if not 0 < request_id < 2**64:
            raise ValueError("request_id must be in [1, 2^64)")
        start = self._next[model]
        for k in range(len(slots)):
            slot = slots[(start + k) % len(slots)]
            if slot.state == "ready":
                payload = wire.encode_request(request_id, prompt_ids, params, framings)
                if len(payload) > slot.channels.writer.max_payload_bytes:
                    raise ValueError(f"request of {len(payload)} bytes exceeds the lane ring's maximum of "
                                     f"{slot.channels.writer.max_payload_bytes} (prompt longer than ctx_size?)")
                self._next[model] = (start + k + 1) % len(slots)
                return slot.submit(request_id, payload, len(framings))
        raise LaneBusy(f"all {len(slots)} lane(s) of model {model!r} are busy or down")

    # --- shutdown -----------------------------------------------------------------------------
    async def drain(self, grace_s: float) -> None:
        """Stop admitting, let in-flight requests finish for grace_s, then end the rest with
        LaneError('shutdown') and cancel them on their lanes."""
        self._draining = True
        deadline = time.monotonic() + grace_s
        while any(s.current_rid is not None for s in self._all_slots()) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for slot in self._all_slots():
            if slot.current_rid is not None:
                rid = slot.current_rid
                slot.fail_current("shutdown", "the server is shutting down")
                slot._send_cancel(rid)
        deadline = time.monotonic() + 1.0
        while any(s.current_rid is not None for s in self._all_slots()) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    def close(self) -> None:
        """Shut every lane down (SHUTDOWN record → SIGTERM → SIGKILL), unlink all names. Idempotent."""
        if self.closing:
            return
        self.closing = True
        atexit.unregister(self.close)
        if self._health_timer is not None:
            self._health_timer.cancel()
        slots = self._all_slots()
        for slot in slots:
            slot.cancel_timers()
            if slot.proc is not None and slot.proc.poll() is None and slot.channels is not None:
                if slot.hello is not None:
                    slot.channels.writer.write(wire.SHUTDOWN, b"")
                else:  # still loading: it reads no ring yet; SIGTERM stops it after the load
                    slot.proc.terminate()
        live = [s.proc for s in slots if s.proc is not None]
        self._wait_exit(live, self.config.shutdown_grace_s)
        for sig_name in ("terminate", "kill"):
            left = [p for p in live if p.poll() is None]
            if not left:
                break
            log.warning("%d lane(s) still running after shutdown: %s", len(left), sig_name)
            for p in left:
                getattr(p, sig_name)()
            self._wait_exit(left, 1.0)
        for slot in slots:
            slot.fail_current("shutdown", "the lane pool was closed")
            slot.current_rid = None
            slot.teardown()
        unlink_run(self.run_id, self.config.shm_dir)  # backstop for anything half-created

    @staticmethod
    def _wait_exit(procs, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for p in procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except Exception:
                pass
