"""Which models have their lanes loaded: loading on first use, LRU unloading under --models-max,
idle unloading (--idle-unload-s, Ollama's `keep_alive`), and the router's load/unload calls.

One owner task (`_run`) makes every change; requests and routes only ask (`can_wait`, `want`,
`ask_unload`, `set_keep_alive`) and wake it. A request for a model that is not loaded waits in
that model's admission queue (gateway.serve.admission) while the owner loads it, first unloading
the least recently used model when --models-max are loaded: an idle one at once, else a busy
one once the requests it holds or had queued have ended (requests that arrive for it after that
choice wait for it to be loaded again, so swapping models back and forth starves neither). A
failed load ends every request waiting for it with ModelLoadFailed; the next request retries.
Everything runs on the serving event loop.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable

from gateway.serve.admission import ModelLoadFailed
from gateway.serve.lanes import LaneError, LaneStartupError, load_model, unload_model

log = logging.getLogger("laneserve.residency")

LOADED, LOADING, UNLOADED, UNLOADING, FAILED = "loaded", "loading", "unloaded", "unloading", "failed"
HOLDING_MEMORY = (LOADED, LOADING, UNLOADING)  # what --models-max counts


def router_status(state, model: str) -> str:
    """loaded, loading, unloading or unloaded (llama-server's router names; a failed load is unloaded)."""
    status = state.residency.status_of(model) if state.residency is not None else LOADED
    return UNLOADED if status == FAILED else status


def keep_alive_or_never(seconds: float) -> float | None:
    """A keep-alive in seconds as the residency keeps it: negative → None (never unload)."""
    return None if seconds < 0 else float(seconds)


@dataclass
class Resident:
    name: str
    on_demand: bool                      # from --models-dir (else --model: loaded at start)
    default_keep_alive_s: float | None   # after a request without its own keep_alive; None = never
    status: str = UNLOADED
    error: str = ""                      # why the last load failed
    keep_alive_s: float | None = None    # idle seconds before unloading; None = never
    used_s: float = 0.0                  # time.monotonic() of its last request activity (LRU)
    idle_since_s: float | None = None    # loaded and unused since then
    wanted_since_s: float | None = None  # a request waits for it to load (served in this order)
    evict_since_s: float | None = None   # chosen to make room: requests arriving later wait
    unload_asked: bool = False           # unload once idle (keep_alive 0 call, POST /models/unload)

    def __post_init__(self) -> None:
        self.keep_alive_s = self.default_keep_alive_s


class Residency:
    def __init__(self, pool, admission, residents: dict[str, Resident], max_loaded: int,
                 on_loaded: Callable[[str], None]) -> None:
        self.pool = pool
        self.admission = admission
        self.residents = residents
        self.max_loaded = max_loaded  # 0: no cap
        self._on_loaded = on_loaded   # (model): its lanes just handshook (the served facts update)
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()  # set and replaced on every status change
        self._task: asyncio.Task | None = None

    # --- asked by requests and routes ------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="residency")

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def accepting(self, model: str, since_s: float) -> bool:
        """May a request that arrived at since_s take a slot of the model now."""
        r = self.residents.get(model)
        if r is None:
            return True
        return r.status == LOADED and (r.evict_since_s is None or since_s < r.evict_since_s)

    def can_wait(self, model: str) -> bool:
        """May a request without a slot queue for the model: a loaded one only while a lane of it
        serves (else 503 at once, as before); one not loaded is loaded for it."""
        r = self.residents.get(model)
        if r is None or (r.status == LOADED and r.evict_since_s is None):
            return self.pool.capacity(model)[1] > 0
        if r.status in (UNLOADED, FAILED):
            self.want(model)
        return True

    def want(self, model: str) -> None:
        r = self.residents[model]
        if r.status in (UNLOADED, FAILED, UNLOADING) and r.wanted_since_s is None:
            r.wanted_since_s = time.monotonic()
            self._wake.set()
        r.unload_asked = False

    def ask_unload(self, model: str) -> None:
        r = self.residents[model]  # requests already waiting for it are still served first
        if r.status in (LOADED, LOADING):
            r.unload_asked = True
            self._wake.set()

    def set_keep_alive(self, model: str, seconds: float | None, default: bool = False) -> None:
        """A request's keep_alive (None: never unload when idle); default: the model's own."""
        r = self.residents.get(model)
        if r is not None:
            r.keep_alive_s = r.default_keep_alive_s if default else seconds
            self._wake.set()

    def capacity_changed(self, model: str) -> None:
        """A request of the model ended or a lane became ready (the pool's on_capacity)."""
        r = self.residents.get(model)
        if r is not None:
            r.used_s = time.monotonic()
            # Only what may unload it needs the owner (a model kept forever and not chosen: no wake-up).
            if r.keep_alive_s is not None or r.evict_since_s is not None or r.unload_asked:
                self._wake.set()

    async def wait_status(self, model: str, statuses: tuple[str, ...], timeout_s: float) -> str:
        """The model's status once it is one of `statuses`, or whatever it is after timeout_s."""
        deadline_s = time.monotonic() + timeout_s
        r = self.residents[model]
        while r.status not in statuses and time.monotonic() < deadline_s:
            try:
                await asyncio.wait_for(self._changed.wait(), deadline_s - time.monotonic())
            except asyncio.TimeoutError:
                break
        return r.status

    def expires_in_s(self, model: str) -> float | None:
        """Seconds until a loaded model unloads if it stays idle; None: never (or not loaded)."""
        r = self.residents[model]
        if r.status != LOADED or r.keep_alive_s is None:
            return None
        if r.unload_asked or r.evict_since_s is not None:
            return 0.0
        if r.idle_since_s is None:
            return r.keep_alive_s
        return max(0.0, r.idle_since_s + r.keep_alive_s - time.monotonic())

    def describe(self, model: str) -> dict:
        """A model's residency as /health/ready, /api/ps, /models and `laneserve ps` show it."""
        r = self.residents[model]
        loaded = r.status == LOADED
        expires_in_s = self.expires_in_s(model)
        return {"status": r.status, "on_demand": r.on_demand, "in_use": loaded and self._busy(r),
                "expires_in_s": None if expires_in_s is None else round(expires_in_s, 1), "error": r.error or None}

    def status_of(self, model: str) -> str:
        """LOADED for a model the residency does not manage (there is none today)."""
        r = self.residents.get(model)
        return LOADED if r is None else r.status

    # --- the owner ---------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            deadline_s = self._next_expiry_s()
            timeout_s = None if deadline_s is None else max(0.0, deadline_s - time.monotonic())
            try:
                await asyncio.wait_for(self._wake.wait(), timeout_s)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            try:
                await self._step()
            except Exception:
                log.exception("residency step failed")

    async def _step(self) -> None:
        now_s = time.monotonic()
        for r in self._with_status(LOADED):
            if self._busy(r):
                r.idle_since_s = None
                continue
            if r.idle_since_s is None:
                r.idle_since_s = now_s
            expired = r.keep_alive_s is not None and now_s - r.idle_since_s >= r.keep_alive_s
            if expired or r.unload_asked or r.evict_since_s is not None:
                await self._unload(r)
        for r in sorted((r for r in self.residents.values() if r.wanted_since_s is not None),
                        key=lambda r: r.wanted_since_s):
            if r.status in (LOADED, LOADING):
                r.wanted_since_s = None
                continue
            if not self._has_room() and not await self._make_room():
                break
            await self._load(r)

    def _next_expiry_s(self) -> float | None:
        ends = [r.idle_since_s + r.keep_alive_s for r in self._with_status(LOADED)
                if r.idle_since_s is not None and r.keep_alive_s is not None]
        return min(ends, default=None)

    def _busy(self, r: Resident) -> bool:
        in_flight = self.pool.capacity(r.name)[0]
        if r.evict_since_s is not None:
            return in_flight > 0 or self.admission.depth_before(r.name, r.evict_since_s) > 0
        return in_flight > 0 or self.admission.depth(r.name) > 0

    def _with_status(self, status: str) -> list[Resident]:
        return [r for r in self.residents.values() if r.status == status]

    def _has_room(self) -> bool:
        held = sum(1 for r in self.residents.values() if r.status in HOLDING_MEMORY)
        return not self.max_loaded or held < self.max_loaded

    async def _make_room(self) -> bool:
        """Choose the least recently used loaded model (idle ones first) to unload; True when
        there is room now, False while the chosen one finishes its requests."""
        loaded = self._with_status(LOADED)
        if any(r.evict_since_s is not None for r in loaded) or not loaded:
            return False
        victim = min(loaded, key=lambda r: (self._busy(r), r.used_s))
        victim.evict_since_s = time.monotonic()
        log.info("unloading %s to make room for another model (--models-max %d)", victim.name, self.max_loaded)
        if self._busy(victim):
            return False
        await self._unload(victim)
        return self._has_room()

    async def _load(self, r: Resident) -> None:
        r.wanted_since_s = None
        self._set_status(r, LOADING)
        r.error = ""
        t0 = time.monotonic()
        try:
            await load_model(self.pool, r.name)
        except LaneStartupError as exc:
            r.error = str(exc)
            self._set_status(r, FAILED)
            log.error("model %s could not be loaded: %s", r.name, r.error)
            self.admission.fail(r.name, ModelLoadFailed(r.name, r.error))
            return
        r.used_s = time.monotonic()
        r.idle_since_s = r.evict_since_s = None
        self._on_loaded(r.name)
        self._set_status(r, LOADED)
        log.info("model %s loaded in %.2f s", r.name, time.monotonic() - t0)
        self.admission.notify(r.name)  # its lanes' handshakes woke the queue while it was still loading

    async def _unload(self, r: Resident) -> None:
        self._set_status(r, UNLOADING)
        try:
            await unload_model(self.pool, r.name)
        except LaneError as exc:
            log.error("model %s did not unload cleanly: %s", r.name, exc)
        r.idle_since_s = r.evict_since_s = None
        r.unload_asked = False
        self._set_status(r, UNLOADED)
        log.info("model %s unloaded", r.name)
        if self.admission.depth(r.name) > 0:
            self.want(r.name)  # requests arrived while it was being unloaded

    def _set_status(self, r: Resident, status: str) -> None:
        r.status = status
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
