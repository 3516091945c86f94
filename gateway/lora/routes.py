"""LoRA adapter routes, under each server's names for them (gateway/lora/selection.py has the rules).

  vLLM          POST /v1/load_lora_adapter {"lora_name", "lora_path"[, "model"]}   load at run time
                POST /v1/unload_lora_adapter {"lora_name"}                          then the name is 404
  llama-server  GET /lora-adapters → [{"id", "path", "scale", "name", "model"}]
                POST /lora-adapters [{"id", "scale"}]                              global scales (others 0)
  SiMa          POST /set_lora {"model", "name"}     the model's default adapter (loaded from --lora-dir
                POST /unset_lora {"model"}           if not loaded yet); back to the base weights
Run-time loads open files inside --lora-dir only: a path that resolves elsewhere is a 400 and is
never opened. Requests already running keep the adapters they started with.
"""
from __future__ import annotations

from pathlib import Path

import orjson
from sanic.response import HTTPResponse

from gateway.http.body import parse_json_object, parse_known_fields
from gateway.http.errors import APIError, invalid
from gateway.lora.selection import Found, parse_request_lora
from gateway.server.config import ConfigError, check_adapter_name

_NAME = {"type": "string", "minLength": 1, "maxLength": 64, "description": "a single directory name"}
LOAD_FIELDS = {"lora_name": _NAME, "lora_path": {"type": "string", "maxLength": 4096}, "model": {"type": "string"},
               "load_inplace": {"type": "boolean"}}
UNLOAD_FIELDS = {"lora_name": _NAME, "lora_int_id": {"type": "integer"}}
SET_FIELDS = {"model": {"type": "string"}, "name": _NAME}
UNSET_FIELDS = {"model": {"type": "string"}}


def _json(payload, status: int = 200) -> HTTPResponse:
    return HTTPResponse(orjson.dumps(payload), status=status, content_type="application/json")


def _text(message: str) -> HTTPResponse:
    return HTTPResponse(message, content_type="text/plain; charset=utf-8")


def _small_body(request, state, fields: dict) -> dict:
    """A small object body; none at all is {} (SiMa's /unset_lora may come without one)."""
    return parse_known_fields(request, state.config, fields) if (request.body or b"").strip() else {}


def _name(value, param: str) -> str:
    try:
        return check_adapter_name(value)
    except ConfigError as exc:
        raise invalid(str(exc), param=param) from None


def _text_models(state) -> list[str]:
    return [name for name, served in state.models.items() if not served.is_audio]


def _find(state, name: str) -> Found:
    found = state.lora.find(state.pool, _text_models(state), name)
    if found is None:
        raise APIError(404, f"no LoRA adapter named {name!r} is loaded", param="lora_name", code="adapter_not_found")
    return found


def _inside_lora_dir(state, given: str, param: str) -> Path:
    lora_dir = state.config.lora_dir
    if not lora_dir:
        raise invalid("this server loads LoRA adapters at run time only from --lora-dir, which is not set",
                      param=param)
    root = Path(lora_dir).resolve()
    path = (root / given).resolve()  # an absolute `given` replaces root
    if not path.is_relative_to(root) or path == root:
        raise invalid(f"{param} must name a file inside --lora-dir", param=param)
    if not path.is_file():
        raise APIError(404, f"no LoRA adapter file {given!r} in --lora-dir", param=param, code="adapter_not_found")
    return path


def _model_for(state, path: Path, requested) -> str:
    """The text model an adapter goes on: the one named, else the one whose architecture it fits."""
    if requested is not None:
        return state.text_model(requested).name
    from lanes._runtime import GgufFile  # native: imported where a file is read

    arch = GgufFile(str(path)).get("general.architecture")
    fits = [m for m in _text_models(state) if state.models[m].text.architecture == arch]
    if len(fits) != 1:
        raise invalid(f"the adapter's architecture {arch!r} fits {len(fits)} served text models "
                      f"({', '.join(fits) or 'none'}): name one in 'model'", param="model")
    return fits[0]


async def _load(state, model: str, name: str, path: Path) -> None:
    from lanes.api import AdapterError

    try:
        await state.pool.load_adapter(model, name, str(path))
    except AdapterError as exc:
        raise invalid(str(exc), param="lora_path", code="adapter_load_failed") from None


async def load_lora_adapter(request):
    state = request.app.ctx.state
    body = parse_known_fields(request, state.config, LOAD_FIELDS)
    name = _name(body.get("lora_name"), "lora_name")
    if type(body.get("lora_path")) is not str:
        raise invalid("'lora_path' is required", param="lora_path", code="missing_required_parameter")
    path = _inside_lora_dir(state, body["lora_path"], "lora_path")
    if name in state.models or state.lora.find(state.pool, _text_models(state), name) is not None:
        raise invalid(f"the name {name!r} is taken (a model or a loaded adapter)", param="lora_name")
    await _load(state, _model_for(state, path, body.get("model")), name, path)
    return _text(f"Success: LoRA adapter '{name}' added successfully.")


async def unload_lora_adapter(request):
    state = request.app.ctx.state
    body = parse_known_fields(request, state.config, UNLOAD_FIELDS)
    found = _find(state, _name(body.get("lora_name"), "lora_name"))
    state.pool.unload_adapter(found.model, found.adapter.name)
    state.lora.forget(found.model, found.adapter)
    return _text(f"Success: LoRA adapter '{found.adapter.name}' removed successfully.")


async def list_lora_adapters(request):
    state = request.app.ctx.state
    return _json([{"id": a.id, "path": a.path, "scale": state.lora.scales.get(a.id, 0.0), "name": a.name, "model": m}
                  for m in _text_models(state) for a in state.lora.loaded(state.pool, m)])


async def set_lora_scales(request):
    state = request.app.ctx.state
    body = parse_json_object(request.body, request.headers.get("content-type"), state.config.max_json_depth,
                             top_level=list)
    scales = parse_request_lora(body) or ()
    known = {a.id for m in _text_models(state) for a in state.lora.loaded(state.pool, m)}
    for adapter_id, _ in scales:
        if adapter_id not in known:
            raise invalid(f"no loaded LoRA adapter has id {adapter_id} (GET /lora-adapters)", param="id")
    state.lora.scales = dict(scales)  # ids left out go to 0, as llama-server sets them
    return _json({"success": True})


async def set_lora(request):
    state = request.app.ctx.state
    body = _small_body(request, state, SET_FIELDS)
    model = state.default_model(body.get("model")).name
    name = _name(body.get("name"), "name")
    if not any(a.name == name for a in state.lora.loaded(state.pool, model)):
        other = state.lora.find(state.pool, _text_models(state), name)
        if other is not None:
            raise invalid(f"LoRA adapter {name!r} belongs to model {other.model!r}", param="name")
        await _load(state, model, name, _inside_lora_dir(state, f"{name}.gguf", "name"))
    state.lora.default[model] = name
    return _json({"model": model, "lora": name, "status": "active"})


async def unset_lora(request):
    state = request.app.ctx.state
    body = _small_body(request, state, UNSET_FIELDS)
    model = state.default_model(body.get("model")).name
    state.lora.default.pop(model, None)
    return _json({"model": model, "lora": None, "status": "base"})
