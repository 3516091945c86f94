"""Lifecycle of the lanes behind one serving process: start (synchronous: every lane ready or
a clean failure), attach to the event loop, drain, close."""
from __future__ import annotations

import gc
import time
from typing import Callable

from gateway.serve.admission import AdmissionQueue
from gateway.serve.lanes import (LaneStartupError, create_pool, model_kind, resident_models, resolve_model_paths,
                                 text_model_path)
from gateway.server.config import GatewayConfig
from gateway.server.metrics import Metrics
from gateway.server.models_dir import eager_entries, on_demand_paths
from gateway.server.on_demand import OnDemandModels
from gateway.server.residency import LOADED, Resident, Residency, keep_alive_or_never
from gateway.server.records import RecordsFile
from gateway.server.state import ServedModel, ServerState
from gateway.ui.routes import PAGE_PATH
from gateway.vision.serving import lane_needs, load_projectors, missing_marker_tokens


class StartupFailed(RuntimeError):
    """Any reason the server cannot start serving; the message is for the operator."""


class ServingLanes:
    """The lanes one serving process owns (their pool and the models' texts), from start to close.
    --model models load at start; --models-dir ones (`on_demand`) load when first used."""

    def __init__(self, pool, paths: dict[str, str], texts: dict, load_s: float = 0.0,
                 on_demand: OnDemandModels | None = None, skipped: list[str] = (), projectors: dict | None = None) -> None:
        self.pool = pool
        self.paths = paths  # the --model ones
        self.texts = texts
        self.projectors = projectors or {}  # model name → gateway.vision.prompt.VisionModel (--mmproj)
        self.load_s = load_s  # model files read + every lane loaded and handshaken
        self.on_demand = on_demand
        self.skipped = list(skipped)  # --models-dir files left out, with the reason
        self.residency: Residency | None = None
        self._closed = False

    @classmethod
    def start(cls, config: GatewayConfig, while_loading: Callable[[], None] | None = None) -> "ServingLanes":
        """while_loading: the caller's own start-up work, run while the lanes load their models."""
        from gateway.text.model_text import ModelText

        t0 = time.monotonic()
        try:
            paths = resolve_model_paths(eager_entries(config))
            dir_paths, skipped = on_demand_paths(config, paths)
        except (FileNotFoundError, ValueError) as exc:
            raise StartupFailed(str(exc)) from None
        if not paths and not dir_paths:
            raise StartupFailed(f"models_dir: {config.models_dir!r} holds no .gguf file (and no --model was given)")
        if config.models_max and len(paths) > config.models_max:
            raise StartupFailed(f"{len(paths)} models given with --model, more than --models-max {config.models_max}")
        try:
            projectors = load_projectors(config, paths, config.lane_threads(resident_models(config, paths)))
        except ValueError as exc:
            raise StartupFailed(str(exc)) from None
        texts: dict = {}
        failed: list[str] = []
        on_demand = None

        def gateway_side() -> None:
            try:
                texts.update({name: ModelText(text_model_path(path)) for name, path in paths.items()
                              if model_kind(path) == "text"})
            except Exception as exc:
                failed.append(f"cannot read model files: {exc}")
                return
            no_markers = missing_marker_tokens(projectors, texts)
            if no_markers:
                failed.append(no_markers)
                return
            if on_demand is not None:
                on_demand.read_all(int(time.time()))  # a broken file is kept aside, not fatal
            if while_loading is not None:
                while_loading()

        try:
            # reads each model's K/V size to size the slots
            pool = create_pool(config, {**paths, **dir_paths}, deferred=tuple(dir_paths), vision=lane_needs(projectors))
        except Exception as exc:
            raise StartupFailed(f"cannot read model files: {exc}") from None
        if dir_paths:
            on_demand = OnDemandModels(dir_paths, config.ctx_size,
                                       {s.name: s.num_slots for s in pool.specs if s.name in dir_paths})
        try:
            pool.start(while_loading=gateway_side)
        except LaneStartupError as exc:
            raise StartupFailed(failed[0] if failed else f"lanes failed to start: {exc}") from None
        except BaseException:
            pool.close()
            raise
        if failed:
            pool.close()
            raise StartupFailed(failed[0])
        return cls(pool, paths, texts, load_s=time.monotonic() - t0, on_demand=on_demand, skipped=skipped,
                   projectors=projectors)

    def attach(self, state: ServerState, loop) -> None:
        self.pool.attach(loop)
        created_s = int(time.time())
        for name, path in self.paths.items():
            info = self.pool.lane_info(name)
            text = self.texts.get(name)  # None: an audio model (no GGUF tokenizer or template)
            state.models[name] = ServedModel(name=name, path=path, text=text, n_ctx=int(info["n_ctx"]),
                                             n_vocab=int(info["n_vocab"]), created_s=created_s,
                                             num_slots=int(info.get("num_slots", 1)),
                                             kv_cache_bytes=int(info.get("kv_cache_bytes", 0)),
                                             n_embd=int(info.get("n_embd", 0)),
                                             kind="text" if text is not None else "audio",
                                             vision=self.projectors.get(name))
            log_model_ready(state, name, info)
        if self.on_demand is not None:
            state.models.update(self.on_demand.served)
            state.on_demand = self.on_demand
            for name, error in self.on_demand.broken.items():
                state.log.error("model_unreadable", model=name, error=error)
            for reason in self.skipped:
                state.log.warning("model_file_skipped", reason=reason)
        pool = self.pool
        residency = self.residency = Residency(pool, None, self._residents(state.config), state.config.models_max,
                                               on_loaded=lambda name: _loaded(state, pool, name))
        state.admission = residency.admission = AdmissionQueue(
            state.config.max_queue, state.config.queue_timeout_s,
            on_wait=state.metrics.observe_queue_wait if state.metrics else None,
            serving=residency.can_wait, accepting=residency.accepting)

        def on_capacity(model: str) -> None:
            state.admission.notify(model)
            residency.capacity_changed(model)

        self.pool.on_capacity = on_capacity
        state.pool = self.pool
        state.residency = residency
        residency.start()

    def _residents(self, config: GatewayConfig) -> dict[str, Resident]:
        residents = {name: Resident(name, False, None, status=LOADED) for name in self.paths}
        idle_s = keep_alive_or_never(config.idle_unload_s)
        for name in (self.on_demand.paths if self.on_demand is not None else ()):
            residents[name] = Resident(name, True, idle_s)
        return residents

    async def drain(self, grace_s: float) -> None:
        if self.residency is not None:
            self.residency.close()  # no model loads or unloads from here on
        await self.pool.drain(grace_s)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self.residency is not None:
                self.residency.close()
            self.pool.close()


def log_model_ready(state: ServerState, name: str, info: dict) -> None:
    state.log.info("model_ready", model=name, replicas=state.config.replicas,
                   slots_per_lane=info.get("num_slots"), ctx_per_slot=info.get("n_ctx"),
                   kv_cache_mib_per_lane=round(info.get("kv_cache_bytes", 0) / 2**20, 1),
                   max_batch_tokens=info.get("max_batch_tokens"))


def _loaded(state: ServerState, pool, name: str) -> None:
    """An on-demand model's lanes handshook: what they report replaces what the file said."""
    info = pool.lane_info(name)
    served = state.models.get(name)
    if served is not None:
        served.n_ctx = int(info["n_ctx"])
        served.num_slots = int(info.get("num_slots", served.num_slots))
        served.kv_cache_bytes = int(info.get("kv_cache_bytes", 0))
        served.n_embd = int(info.get("n_embd", served.n_embd))
    log_model_ready(state, name, info)


def startup_summary(state: ServerState, url: str, load_s: float) -> dict:
    """What an operator wants to see once at start: where, what, how much (one log event)."""
    config = state.config
    residents = state.residency.residents if state.residency is not None else {}
    loaded = [name for name in state.models if name not in residents or residents[name].status == LOADED]
    models = {name: f"{config.replicas} lane(s) x {m.num_slots} slots, ctx {m.n_ctx}/slot" if name in loaded
              else "loaded on demand" for name, m in state.models.items()}
    kv_bytes = sum(m.kv_cache_bytes for m in state.models.values()) * config.replicas
    threads = state.pool.specs[0].threads if state.pool is not None else config.lane_threads()
    return {"url": url, "ui": url.rstrip("/") + PAGE_PATH, "models": models, "lanes": config.replicas * len(loaded),
            "threads_per_lane": threads, "kv_cache_mib": round(kv_bytes / 2**20, 1), "load_s": round(load_s, 2)}


def freeze_startup_heap() -> None:
    """Move everything alive after start-up (Sanic, Jinja, tokenizers, metrics: ~41k objects)
    out of the collector's reach. A full collection over that heap took 14-18 ms here, added to
    whichever request triggers one; per-request garbage is still collected as before."""
    gc.collect()
    gc.freeze()


def open_observers(state: ServerState) -> None:
    if state.metrics is None:
        state.metrics = Metrics(state)
    if state.config.records and state.records is None:
        state.records = RecordsFile(state.config.records)
