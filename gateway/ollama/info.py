"""GET /api/tags, POST /api/show, GET /api/ps, GET /api/version, GET|HEAD / — what Ollama clients
probe before they chat (Copilot, Open WebUI and the ollama clients call /api/tags and /api/show)."""
from __future__ import annotations

import asyncio
import os
import time

import orjson
from sanic.response import HTTPResponse

from gateway.serve.lanes import SERVING_STATES, text_model_path
from gateway.http.body import parse_json_object
from gateway.ollama.frames import rfc3339
from gateway.ollama.models import digest, model_facts
from gateway.ollama.requests import OllamaError
from gateway.ollama.errors import ollama_errors, served_model
from gateway.server.residency import LOADED, router_status
from gateway.serve.lanes import resident_bytes

# The Ollama API level these routes follow (what clients compare against), not a laneserve version.
OLLAMA_API_VERSION = "0.12.0"
FAR_FUTURE = 4102444800.0  # 2100-01-01: the expiry shown for a model that never unloads when idle


def _json(value, status: int = 200) -> HTTPResponse:
    return HTTPResponse(orjson.dumps(value), status=status, content_type="application/json; charset=utf-8")


def _facts(served):
    path = served.path if os.path.exists(served.path) else text_model_path(served.path)
    template = served.text.chat_template.source if served.text.chat_template is not None else ""
    return model_facts(path, template)


async def _entry(served) -> dict:
    facts = _facts(served)
    return {"name": served.name, "model": served.name, "modified_at": rfc3339(facts.modified_s),
            "size": facts.size_bytes, "digest": await asyncio.to_thread(digest, facts.path),
            "details": facts.details()}


@ollama_errors
async def tags(request):
    state = request.app.ctx.state
    # Ollama has no speech-to-text models: its clients expect GGUF details, so only text models show.
    # Every registered model is listed, loaded or not ("loaded" is ours: Ollama has no such field).
    models = []
    for served in state.models.values():
        if not served.is_audio:
            entry = await _entry(served)
            entry["loaded"] = router_status(state, served.name) == LOADED
            models.append(entry)
    return _json({"models": models})


def _expires_at_s(state, model: str) -> float:
    in_s = state.residency.expires_in_s(model) if state.residency is not None else None
    return FAR_FUTURE if in_s is None else time.time() + in_s


@ollama_errors
async def ps(request):
    """Loaded models: the memory their lanes hold (RSS; all in RAM, so size_vram is 0) and when
    they unload if they stay idle."""
    state = request.app.ctx.state
    serving = {s.model for s in state.statuses() if s.state in SERVING_STATES}
    models = []
    for served in state.models.values():
        if served.name not in serving or served.is_audio or router_status(state, served.name) != LOADED:
            continue
        entry = await _entry(served)
        entry.update(size=resident_bytes(state.pool, served.name), expires_at=rfc3339(_expires_at_s(state, served.name)),
                     size_vram=0, context_length=served.n_ctx)
        models.append(entry)
    return _json({"models": models})


# What `show` reads: `model`, or the older spelling `name` when `model` is absent; both are
# type-checked when present.
SHOW_BODY = {"type": "object", "properties": {"model": {"type": "string", "minLength": 1}, "name": {"type": "string"}},
             "anyOf": [{"required": ["model"]}, {"required": ["name"]}], "additionalProperties": True}


OLLAMA_CAPABILITIES = ("completion", "tools", "thinking", "embedding", "vision", "insert")  # Ollama's names


def capabilities(served) -> list[str]:
    """The served model's capabilities that Ollama has names for (it has no "chat")."""
    return [c for c in served.capabilities if c in OLLAMA_CAPABILITIES]


@ollama_errors
async def show(request):
    state = request.app.ctx.state
    body = parse_json_object(request.body, None, state.config.max_json_depth)
    for key in ("model", "name"):
        if key in body and type(body[key]) is not str:
            raise OllamaError(400, f"{key} must be a string")
    name = body.get("model", body.get("name"))  # "name" is the older spelling
    if not name:
        raise OllamaError(400, "model is required")
    served = served_model(state, name)
    facts = _facts(served)
    info = dict(facts.info)
    info[f"{facts.family}.context_length"] = info.get(f"{facts.family}.context_length", served.n_ctx)
    return _json({
        "modelfile": f"# laneserve serves {served.name} from its GGUF file\nFROM {served.name}\n",
        "parameters": "",
        "template": facts.template,
        "details": facts.details(),
        "model_info": info,
        "capabilities": capabilities(served),
        "modified_at": rfc3339(facts.modified_s),
    })


@ollama_errors
async def version(request):
    return _json({"version": OLLAMA_API_VERSION})


async def root(request):
    return HTTPResponse(b"Ollama is running", content_type="text/plain; charset=utf-8")
