"""llama-server's router routes: which models exist and whether they are loaded, and explicit
loading and unloading (gateway.server.residency does both).

* `GET /models` → `{"object": "list", "data": [{"id", "object": "model", "owned_by", "created",
  "path", "status": {"value": "loaded" | "loading" | "unloading" | "unloaded"}}]}`; a model whose
  last load failed (or whose file cannot be read) is "unloaded" with `"failed": true` and the
  reason in `"error"`.
* `POST /models/load {"model": NAME}` → 200 `{"success": true}` once it is loaded (waits up to
  --queue-timeout-s; unloads the least recently used idle model first at --models-max); 500
  `model_load_failed` when it cannot be loaded.
* `POST /models/unload {"model": NAME}` → 200 `{"success": true}` once its lanes are gone (it
  waits for the model's requests to end, up to --queue-timeout-s; else 503).
"""
from __future__ import annotations

import orjson
from sanic.response import HTTPResponse

from gateway.http.body import parse_json_object
from gateway.http.errors import invalid, load_failed, safe_repr, unavailable
from gateway.http.fields import get_str
from gateway.server.residency import FAILED, LOADED, UNLOADED, router_status

MODEL_FIELDS = {"model": {"type": "string", "minLength": 1, "maxLength": 256, "description": "the model's name"}}


def _json(payload: dict) -> HTTPResponse:
    return HTTPResponse(orjson.dumps(payload), status=200, content_type="application/json")


def _entry(state, name: str, path: str, created_s: int, error: str | None) -> dict:
    entry = {"id": name, "object": "model", "owned_by": "laneserve", "created": created_s, "path": path,
             "status": {"value": "unloaded" if error else router_status(state, name)}}
    if error:
        entry["status"].update(failed=True, error=error)
    return entry


async def router_models(request):
    state = request.app.ctx.state
    data = []
    for name, served in state.models.items():
        describe = state.residency.describe(name) if state.residency is not None else {}
        failed = describe.get("status") == FAILED
        data.append(_entry(state, name, served.path, served.created_s, describe.get("error") if failed else None))
    broken = state.on_demand.broken if state.on_demand is not None else {}
    for name, error in broken.items():
        data.append(_entry(state, name, state.on_demand.paths[name], 0, error))
    return _json({"object": "list", "data": data})


def _model_of(request) -> str:
    state = request.app.ctx.state
    body = parse_json_object(request.body, request.headers.get("content-type"), state.config.max_json_depth)
    unknown = sorted(k for k in body if k not in MODEL_FIELDS)
    if unknown and not state.config.lenient:
        raise invalid(f"Unrecognized request argument supplied: {safe_repr(unknown[0])}",
                      param=safe_repr(unknown[0]).strip("'"), code="unknown_parameter")
    requested = get_str(body, "model", None, 256)
    if requested is None:
        raise invalid("'model' is required", param="model", code="missing_required_parameter")
    return state.model(requested).name  # 404 model_not_found; 500 model_load_failed for an unreadable file


async def load_model(request):
    state = request.app.ctx.state
    model = _model_of(request)
    residency, timeout_s = state.residency, state.config.queue_timeout_s
    residency.want(model)
    status = await residency.wait_status(model, (LOADED, FAILED), timeout_s)
    if status == FAILED:
        raise load_failed(model, residency.residents[model].error)
    if status != LOADED:
        raise unavailable(f"model {model!r} did not load within {timeout_s:g} s", state.config.retry_after_s,
                          code="model_loading")
    return _json({"success": True})


async def unload_model(request):
    state = request.app.ctx.state
    model = _model_of(request)
    residency, timeout_s = state.residency, state.config.queue_timeout_s
    residency.ask_unload(model)
    status = await residency.wait_status(model, (UNLOADED, FAILED), timeout_s)
    if status not in (UNLOADED, FAILED):
        raise unavailable(f"model {model!r} still serves requests after {timeout_s:g} s", state.config.retry_after_s,
                          code="model_busy")
    return _json({"success": True})
