"""llama-server's router routes: which models exist and whether they are loaded, and explicit
loading and unloading (gateway.server.residency does both).

* `GET /models` → `{"object": "list", "data": [{"id", "object": "model", "owned_by", "created",
  "path", "status": {"value": "loaded" | "loading" | "unloading" | "unloaded"}}]}`; a model whose
  last load failed (or whose file cannot be read) is "unloaded" with `"failed": true` and the
  reason in `"error"`.
* `POST /models/load {"model": NAME}` → 200 `{"success": true}` once it is loaded (waits up to
  --queue-timeout-s; unloads the least recently used idle model first at --models-max); 503
  `model_load_failed` when it cannot be loaded.
* `POST /models/unload {"model": NAME}` → 200 `{"success": true}` once its lanes are gone (it
  waits for the model's requests to end, up to --queue-timeout-s; else 503).
"""
from __future__ import annotations

import orjson
from sanic.response import HTTPResponse

from gateway.http.body import parse_known_fields
from gateway.http.errors import invalid, load_failed, unavailable
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
    body = parse_known_fields(request, state.config, MODEL_FIELDS)
    requested = get_str(body, "model", None, 256)
    if requested is None:
        raise invalid("'model' is required", param="model", code="missing_required_parameter")
    return state.model(requested).name  # 404 model_not_found; 503 model_load_failed for an unreadable file


async def _settle(request, load: bool):
    """Ask for the load (or unload), then wait up to --queue-timeout-s for it to happen."""
    state = request.app.ctx.state
    model = _model_of(request)
    residency, timeout_s = state.residency, state.config.queue_timeout_s
    if load:
        residency.want(model)
    else:
        residency.ask_unload(model)
    status = await residency.wait_status(model, (LOADED, FAILED) if load else (UNLOADED, FAILED), timeout_s)
    if load and status == FAILED:
        raise load_failed(model, residency.residents[model].error)
    if status not in ((LOADED,) if load else (UNLOADED, FAILED)):
        doing = "did not load" if load else "still serves requests after"
        raise unavailable(f"model {model!r} {doing} within {timeout_s:g} s", state.config.retry_after_s,
                          code="model_loading" if load else "model_busy")
    return _json({"success": True})


async def load_model(request):
    return await _settle(request, load=True)


async def unload_model(request):
    return await _settle(request, load=False)
