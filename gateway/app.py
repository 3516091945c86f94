"""The Sanic application factory.

Two launch paths share it:
* `laneserve serve` starts the lanes first, then runs Sanic in a single process with the
  already-started pool (`create_app(config=…, backend=…)`).
* `sanic gateway.app:create_app --factory` calls `create_app(args)` in the main process and in
  each worker; the lanes are started only in the worker, in `before_server_start` (the factory
  itself has no side effects).
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal

from sanic import Sanic

from gateway.http import auth
from gateway.serve import control_routes, slot_routes
from gateway.embeddings import routes as embedding_routes
from gateway.http import error_handler as errors_http
from gateway.server import info_routes, router_routes
from gateway.openai import routes as openai_routes
from gateway.anthropic import errors as anthropic_errors
from gateway.anthropic import routes as anthropic_routes
from gateway.server import tokenize_routes
from gateway.audio import routes as audio_routes
from gateway.ollama import errors as ollama_errors
from gateway.ollama import info as ollama_info
from gateway.ollama import routes as ollama_routes
from gateway.responses import routes as responses_routes
from gateway.lora import routes as lora_routes
from gateway.ui import routes as ui_routes
from gateway.server.config import ConfigError, GatewayConfig, config_from_strings, field_names
from gateway.http.cors import add_cors
from gateway.server.env import settings_from_env
from gateway.server.logs import configure_logging, get_logger
from gateway.server.state import ServerState

APP_NAME = "laneserve"
# Sanic CLI flags that mean the same as ours but belong to Sanic (it binds the socket itself).
_SANIC_OWNED = ("host", "port")


def settings_from_namespace(args: object) -> dict:
    """Our fields from a Sanic CLI namespace: unknown `--ctx-size 2048` arrives as args.ctx_size."""
    out = {}
    for name in field_names():
        if name in _SANIC_OWNED:
            continue
        value = getattr(args, "model" if name == "models" else name, None)
        if value is not None:
            out[name] = value
    return out


def config_from_launch(args: object = None) -> GatewayConfig:
    base = config_from_strings(settings_from_env())
    if isinstance(args, argparse.Namespace):
        return config_from_strings(settings_from_namespace(args), base)
    return base


def create_app(args: object = None, *, config: GatewayConfig | None = None, backend=None) -> Sanic:
    try:
        config = config or config_from_launch(args)
        return _build(config, backend)
    except TypeError as exc:
        # Sanic retries a factory that raises TypeError without arguments, silently dropping
        # every --flag; make a bug here fail loudly instead.
        raise RuntimeError(f"laneserve: could not build the app: {exc}") from exc




def _build(config: GatewayConfig, backend) -> Sanic:
    app = Sanic(APP_NAME)
    app.config.update(
        REQUEST_MAX_SIZE=config.max_body_bytes,
        RESPONSE_TIMEOUT=config.response_timeout_s,
        REQUEST_TIMEOUT=config.request_deadline_s,
        GRACEFUL_SHUTDOWN_TIMEOUT=config.drain_grace_s + 5.0,
        ACCESS_LOG=False,
        NOISY_EXCEPTIONS=False,
        FALLBACK_ERROR_FORMAT="json",
    )
    state = ServerState(config=config)
    app.ctx.state = state
    app.ctx.backend = backend

    key_check = auth.key_check(config)  # None: no API key configured, every route open

    def route(handler, path: str, method: str, stream: bool = False, name: str | None = None) -> None:
        wrapped = auth.protect(errors_http.with_request_id(handler), path, key_check)
        app.add_route(wrapped, path, methods=[method], name=name or handler.__name__, stream=stream)

    route(openai_routes.completions, "/v1/completions", "POST")
    route(openai_routes.chat_completions, "/v1/chat/completions", "POST")
    route(responses_routes.create, "/v1/responses", "POST")
    route(responses_routes.retrieve, "/v1/responses/<response_id:str>", "GET")
    route(responses_routes.delete, "/v1/responses/<response_id:str>", "DELETE")
    route(anthropic_routes.messages, "/v1/messages", "POST")
    route(anthropic_routes.count_tokens, "/v1/messages/count_tokens", "POST")
    route(info_routes.list_models, "/v1/models", "GET")
    route(info_routes.get_model, "/v1/models/<model_id:str>", "GET")
    route(lora_routes.load_lora_adapter, "/v1/load_lora_adapter", "POST")
    route(lora_routes.unload_lora_adapter, "/v1/unload_lora_adapter", "POST")
    route(lora_routes.list_lora_adapters, "/lora-adapters", "GET")
    route(lora_routes.set_lora_scales, "/lora-adapters", "POST")
    route(lora_routes.set_lora, "/set_lora", "POST")
    route(lora_routes.unset_lora, "/unset_lora", "POST")
    route(router_routes.router_models, "/models", "GET")
    route(router_routes.load_model, "/models/load", "POST")
    route(router_routes.unload_model, "/models/unload", "POST")
    route(info_routes.health_live, "/health/live", "GET")
    route(info_routes.health_ready, "/health/ready", "GET")
    route(info_routes.health_llama_server, "/health", "GET")  # llama-server's
    route(info_routes.health_llama_server, "/v1/health", "GET", name="v1_health")
    route(info_routes.metrics, "/metrics", "GET")
    route(info_routes.openapi_document, "/openapi.json", "GET")
    route(tokenize_routes.tokenize, "/tokenize", "POST")
    route(tokenize_routes.detokenize, "/detokenize", "POST")
    route(ollama_routes.chat, "/api/chat", "POST")
    route(ollama_routes.generate, "/api/generate", "POST")
    route(ollama_info.tags, "/api/tags", "GET")
    route(ollama_info.show, "/api/show", "POST")
    route(ollama_info.ps, "/api/ps", "GET")
    route(ollama_info.version, "/api/version", "GET")
    app.add_route(auth.protect(errors_http.with_request_id(ollama_info.root), "/", key_check), "/",
                  methods=["GET", "HEAD"], name="ollama_root")
    route(control_routes.stop, "/stop", "POST")
    route(control_routes.cancel_request, "/v1/requests/<request_id:str>", "DELETE")
    route(slot_routes.slot_action, "/slots/<id_slot:int>", "POST")
    route(embedding_routes.openai_embeddings, "/v1/embeddings", "POST")
    route(embedding_routes.ollama_embed, "/api/embed", "POST")
    route(embedding_routes.ollama_embeddings, "/api/embeddings", "POST")
    route(audio_routes.transcriptions, "/v1/audio/transcriptions", "POST", stream=True)  # reads its own body
    route(audio_routes.translations, "/v1/audio/translations", "POST", stream=True)
    route(ui_routes.page, ui_routes.PAGE_PATH, "GET")  # /ui/ too (Sanic ignores a trailing slash)
    route(ui_routes.asset, ui_routes.ASSET_PATH, "GET")
    errors_http.install(app, responders=((anthropic_errors.is_messages_path, anthropic_errors.error_response),
                                         (ollama_errors.is_ollama_path, ollama_errors.error_response)))
    add_cors(app, config.cors_origins)

    app.register_listener(_before_start, "before_server_start")
    app.register_listener(_before_stop, "before_server_stop")
    app.register_listener(_after_stop, "after_server_stop")
    return app


async def _before_start(app: Sanic) -> None:
    # lanes only where they run
    from gateway.server.lifecycle import ServingLanes, freeze_startup_heap, open_observers, startup_summary

    state: ServerState = app.ctx.state
    configure_logging(state.config.log_level, state.config.log_format)
    state.log = get_logger()
    backend = app.ctx.backend
    if backend is None:
        # Sanic CLI path: this worker owns the lanes. Sanic marks its workers daemonic, and a
        # daemonic process may not start children; the pool closes its lanes on stop and each
        # lane dies with its parent, so lifting the flag cannot leave orphans.
        if multiprocessing.current_process().daemon:
            multiprocessing.current_process().daemon = False
        try:
            backend = ServingLanes.start(state.config)
        except Exception as exc:
            state.log.error("startup_failed", error=str(exc))
            _exit_startup_failure(app, str(exc))
        app.ctx.backend = backend
    open_observers(state)
    backend.attach(state, asyncio.get_running_loop())
    freeze_startup_heap()
    state.log.info("serving", **startup_summary(state, app.serve_location, backend.load_s), pid=os.getpid(),
                   api_key=state.config.api_key is not None or state.config.api_key_file is not None)


def _exit_startup_failure(app: Sanic, message: str) -> None:
    print(f"laneserve: startup failed: {message}", flush=True)
    # Tell Sanic's manager at once (otherwise it waits 30 s for this worker's ack), then leave
    # with a non-zero status; the manager then stops and the `sanic` command exits non-zero.
    try:
        app.multiplexer.terminate(early=True)
    except Exception:
        pass  # --single-process: there is no manager to tell
    os._exit(3)


async def _before_stop(app: Sanic) -> None:
    # Sanic keeps its listener open until this returns: requests still arrive meanwhile.
    state: ServerState = app.ctx.state
    state.stopping = True  # /health/ready answers 503 "draining" from here on
    backend = app.ctx.backend
    if backend is None:
        state.draining = True
        return
    # Sanic stops listening for signals before this listener runs; a second SIGINT/SIGTERM
    # during the delay or the grace period must still cut it short (operators expect that).
    loop = asyncio.get_running_loop()
    forced = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, forced.set)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread: no second-signal shortcut
    force = asyncio.ensure_future(forced.wait())
    delay_s = state.config.drain_delay_s
    if delay_s > 0:
        # 1. Not ready, still serving: a balancer's health check sees 503 and stops sending.
        state.log.info("drain_delay", delay_s=delay_s)
        await asyncio.wait({force}, timeout=delay_s)
    # 2. Refuse new work (503 + Retry-After); in-flight requests finish within the grace period.
    state.draining = True
    state.log.info("draining", grace_s=state.config.drain_grace_s)
    drain = asyncio.ensure_future(backend.drain(0.0 if forced.is_set() else state.config.drain_grace_s))
    await asyncio.wait({drain, force}, return_when=asyncio.FIRST_COMPLETED)
    force.cancel()
    if not drain.done() or forced.is_set():
        state.log.info("drain_forced")
        drain.cancel()
        await backend.drain(0.0)  # end every in-flight request now, with an error event


async def _after_stop(app: Sanic) -> None:
    state: ServerState = app.ctx.state
    backend = app.ctx.backend
    if backend is not None:
        backend.close()
        app.ctx.backend = None
    if state.records is not None:
        state.records.close()
        state.records = None
    state.log.info("stopped")


__all__ = ["ConfigError", "create_app", "config_from_launch"]
