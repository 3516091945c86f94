"""Lifecycle of the lanes behind one serving process: start (synchronous: every lane ready or
a clean failure), attach to the event loop, drain, close."""
from __future__ import annotations

import gc
import time
from typing import Callable

from gateway.serve.admission import AdmissionQueue
from gateway.serve.lanes import LaneStartupError, create_pool, model_kind, resolve_model_paths, text_model_path
from gateway.server.config import GatewayConfig
from gateway.server.metrics import Metrics
from gateway.server.records import RecordsFile
from gateway.server.state import ServedModel, ServerState
from gateway.ui.routes import PAGE_PATH


class StartupFailed(RuntimeError):
    """Any reason the server cannot start serving; the message is for the operator."""


class ServingLanes:
    """The lanes one serving process owns (their pool and the models' texts), from start to close."""

    def __init__(self, pool, paths: dict[str, str], texts: dict, load_s: float = 0.0) -> None:
        self.pool = pool
        self.paths = paths
        self.texts = texts
        self.load_s = load_s  # model files read + every lane loaded and handshaken
        self._closed = False

    @classmethod
    def start(cls, config: GatewayConfig, while_loading: Callable[[], None] | None = None) -> "ServingLanes":
        """while_loading: the caller's own start-up work, run while the lanes load their models."""
        from gateway.text.model_text import ModelText

        t0 = time.monotonic()
        try:
            paths = resolve_model_paths(config)
        except (FileNotFoundError, ValueError) as exc:
            raise StartupFailed(str(exc)) from None
        texts: dict = {}
        failed: list[str] = []

        def gateway_side() -> None:
            try:
                texts.update({name: ModelText(text_model_path(path)) for name, path in paths.items()
                              if model_kind(path) == "text"})
            except Exception as exc:
                failed.append(f"cannot read model files: {exc}")
                return
            if while_loading is not None:
                while_loading()

        try:
            pool = create_pool(config, paths)  # reads each model's K/V size to size the slots
        except Exception as exc:
            raise StartupFailed(f"cannot read model files: {exc}") from None
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
        return cls(pool, paths, texts, load_s=time.monotonic() - t0)

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
                                             kind="text" if text is not None else "audio")
            state.log.info("model_ready", model=name, replicas=state.config.replicas,
                           slots_per_lane=info.get("num_slots"), ctx_per_slot=info.get("n_ctx"),
                           kv_cache_mib_per_lane=round(info.get("kv_cache_bytes", 0) / 2**20, 1),
                           max_batch_tokens=info.get("max_batch_tokens"))
        pool = self.pool
        state.admission = AdmissionQueue(state.config.max_queue, state.config.queue_timeout_s,
                                         on_wait=state.metrics.observe_queue_wait if state.metrics else None,
                                         serving=lambda model: pool.capacity(model)[1] > 0)
        self.pool.on_capacity = state.admission.notify
        state.pool = self.pool

    async def drain(self, grace_s: float) -> None:
        await self.pool.drain(grace_s)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.pool.close()


def startup_summary(state: ServerState, url: str, load_s: float) -> dict:
    """What an operator wants to see once at start: where, what, how much (one log event)."""
    config = state.config
    models = {name: f"{config.replicas} lane(s) x {m.num_slots} slots, ctx {m.n_ctx}/slot"
              for name, m in state.models.items()}
    kv_bytes = sum(m.kv_cache_bytes for m in state.models.values()) * config.replicas
    return {"url": url, "ui": url.rstrip("/") + PAGE_PATH, "models": models, "lanes": config.replicas * len(state.models),
            "threads_per_lane": config.lane_threads(), "kv_cache_mib": round(kv_bytes / 2**20, 1),
            "load_s": round(load_s, 2)}


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
