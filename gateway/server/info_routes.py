"""GET /v1/models, /v1/models/<id>, /health/live, /health/ready, /metrics, /openapi.json."""
from __future__ import annotations

import orjson
from sanic.response import HTTPResponse

from gateway.server import openapi
from gateway.serve.lanes import SERVING_STATES, stats_per_model
from gateway.server.residency import LOADED, router_status


def _json(value, status: int = 200, headers: dict | None = None) -> HTTPResponse:
    return HTTPResponse(orjson.dumps(value), status=status, headers=headers, content_type="application/json")


def _model_card(state, served, statuses) -> dict:
    lanes = [s for s in statuses if s.model == served.name]
    return {
        "id": served.name,
        "object": "model",
        "created": served.created_s,
        "owned_by": "laneserve",
        "root": served.name,
        "parent": None,
        "max_model_len": served.n_ctx,
        "status": {"value": router_status(state, served.name)},  # llama-server router's field
        "laneserve": {
            "streaming": "incremental",
            "replicas": len(lanes),
            "ready_replicas": sum(1 for s in lanes if s.state in SERVING_STATES),
            "context_length": served.n_ctx,
            "slots_per_replica": served.num_slots,
            "capabilities": served.capabilities,
            "architecture": "whisper" if served.is_audio else served.text.architecture,
        },
    }


def _adapter_card(state, served, adapter, statuses) -> dict:
    """A LoRA adapter as vLLM lists it: a model of its own whose `parent` is the base model."""
    card = _model_card(state, served, statuses)
    card.update(id=adapter.name, root=adapter.path, parent=served.name)
    card["laneserve"] = {**card["laneserve"], "lora": {"id": adapter.id, "path": adapter.path}}
    return card


def _cards(state, statuses) -> list[dict]:
    cards = []
    for served in state.models.values():
        cards.append(_model_card(state, served, statuses))
        cards += [_adapter_card(state, served, a, statuses) for a in state.lora.loaded(state.pool, served.name)
                  if not served.is_audio]
    return cards


async def list_models(request):
    state = request.app.ctx.state
    return _json({"object": "list", "data": _cards(state, state.statuses())})


async def get_model(request, model_id: str):
    state = request.app.ctx.state
    served, statuses = state.model(model_id), state.statuses()
    if served.name == model_id:
        return _json(_model_card(state, served, statuses))
    found = state.lora.find(state.pool, [served.name], model_id)
    return _json(_adapter_card(state, served, found.adapter, statuses))


async def health_live(request):
    return _json({"status": "ok"})


def prompt_cache_info(stats) -> dict | None:
    """A model's prompt caches summed over its lanes (lanes.wire.Stats); None before any lane reported."""
    if stats is None:
        return None
    return {"bytes": stats.prompt_cache_bytes, "budget_bytes": stats.prompt_cache_budget_bytes,
            "entries": stats.prompt_cache_entries, "hits": stats.prompt_cache_hits,
            "hit_tokens": stats.prompt_cache_hit_tokens, "evictions": stats.prompt_cache_evictions,
            "kv_pages": stats.kv_pages_total, "kv_pages_free": stats.kv_pages_free,
            "kv_window_pages": stats.kv_window_pages_total, "kv_window_pages_free": stats.kv_window_pages_free,
            "disk_reads": stats.prompt_cache_disk_reads, "disk_writes": stats.prompt_cache_disk_writes,
            "disk_bytes": stats.prompt_cache_disk_bytes, "disk_budget_bytes": stats.prompt_cache_disk_budget_bytes}


def readiness(state) -> tuple[int, dict]:
    """200 only when every model has a lane that can serve and the server is not draining."""
    statuses = state.statuses()
    lane_stats = stats_per_model(state.pool.lane_stats() if state.pool is not None else ())
    models = {}
    all_serving = True
    for name in state.models:
        lanes = [s for s in statuses if s.model == name]
        serving = sum(1 for s in lanes if s.state in SERVING_STATES)
        residency = state.residency.describe(name) if state.residency is not None else None
        loaded = residency is None or residency["status"] == LOADED
        all_serving &= serving > 0 or not loaded  # one not loaded is loaded by its next request
        served = state.models[name]
        models[name] = {
            "status": ("ready" if serving == len(lanes) and lanes else ("degraded" if serving else "unavailable"))
            if loaded else residency["status"],
            "residency": residency,
            "ready_replicas": serving,
            "slots": sum(s.num_slots for s in lanes if s.state in SERVING_STATES),
            "slots_in_use": sum(s.in_flight for s in lanes),
            "queued": state.admission.depth(name) if state.admission is not None else 0,
            "ctx_per_slot": served.n_ctx,
            "lora": [{"id": a.id, "name": a.name} for a in state.lora.loaded(state.pool, name)],
            "lora_errors": dict(getattr(state.pool, "adapter_errors", {}).get(name, {})),
            "lanes": [{"index": s.index, "state": s.state, "pid": s.pid, "restarts": s.restarts,
                       "slots": s.num_slots, "slots_in_use": s.in_flight,
                       "kv_cache_bytes": s.kv_cache_bytes} for s in lanes],
            "prompt_cache": prompt_cache_info(lane_stats.get(name)),
        }
    if state.stopping or state.draining:
        status = "draining"
    elif not all_serving or state.pool is None:
        status = "unavailable"
    elif all(m["status"] in ("ready", "unloaded", "loading", "unloading", "failed") for m in models.values()):
        status = "ready"
    else:
        status = "degraded"
    code = 200 if status in ("ready", "degraded") else 503
    return code, {"status": status, "models": models}


async def health_ready(request):
    state = request.app.ctx.state
    code, body = readiness(state)
    headers = {"Retry-After": str(state.config.retry_after_s)} if code == 503 else None
    return _json(body, code, headers)


async def health_llama_server(request):
    """llama-server's /health and /v1/health: {"status": "ok"} once every model can serve, else
    503 in its error shape (what its clients and scripts poll for)."""
    state = request.app.ctx.state
    code, body = readiness(state)
    if code == 200:
        return _json({"status": "ok"})
    message = "Server is draining" if body.get("status") == "draining" else "Loading model"
    return _json({"error": {"code": 503, "message": message, "type": "unavailable_error"}}, 503,
                 {"Retry-After": str(state.config.retry_after_s)})


async def openapi_document(request):
    config = request.app.ctx.state.config
    key = config.api_key is not None or config.api_key_file is not None
    return _json(openapi.document(lenient=config.lenient, api_key=key))


async def metrics(request):
    body = request.app.ctx.state.metrics.render()
    return HTTPResponse(body, content_type="text/plain; version=0.0.4; charset=utf-8")
