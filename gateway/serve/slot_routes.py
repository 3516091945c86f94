"""llama-server's slot files: `POST /slots/{id_slot}?action=save|restore|erase` (lanes/slot_files.py,
csrc/engine/slot_file.h), for clients that keep a conversation's prefill across sessions.

* save `{"filename": "name.bin"}` → `{"id_slot", "filename", "n_saved", "n_written", "timings": {"save_ms"}}`:
  the slot's last base-model sequence's cached K/V and token ids, to a file in --prefix-cache-dir (a busy slot: 400).
* restore `{"filename": ...}` → `{"id_slot", "filename", "n_restored", "n_read", "timings": {"restore_ms"}}`:
  such a file's pages into the lane's prefix cache, where any prompt starting with its tokens maps them.
* erase → `{"id_slot", "n_erased"}`: the slot forgets its last sequence (its pages stay cached for others).

A server-wide slot id is lane index × --parallel + slot. `filename` is a plain name (no path separator, no
"..", no NUL, not empty): else 400. Errors in llama-server's shape `{"error": {"code", "message", "type"}}`;
without --prefix-cache-dir every action is 501. An optional "model" picks the model (default: the first).
"""
from __future__ import annotations

import orjson
from sanic.response import HTTPResponse

from gateway.http.body import parse_known_fields
from gateway.http.errors import APIError
from lanes import slot_files

SLOT_FIELDS = {"filename": {"type": "string", "minLength": 1, "maxLength": 255,
                            "description": "a plain file name inside --prefix-cache-dir"},
               "model": {"type": "string", "description": "the model whose slot it is; default the first"}}


def _answer(payload: dict, status: int = 200) -> HTTPResponse:
    return HTTPResponse(orjson.dumps(payload), status=status, content_type="application/json")


def _error(status: int, message: str, kind: str = "invalid_request_error") -> HTTPResponse:
    return _answer({"error": {"code": status, "message": message, "type": kind}}, status)


def _slot_error(exc: slot_files.SlotFileError, retry_after_s: int) -> HTTPResponse:
    if exc.kind == "bad_request":
        return _error(400, str(exc))
    if exc.kind == "unavailable":  # as every route answers while a lane restarts
        response = _error(503, str(exc), "unavailable_error")
        response.headers["Retry-After"] = str(retry_after_s)
        return response
    return _error(500, str(exc), "server_error")


def plain_filename(value) -> str | None:
    """The file name, or None when it is not a plain name inside the directory."""
    if not isinstance(value, str):
        return None
    try:
        if not 0 < len(value.encode("utf-8")) <= 255:
            return None
    except UnicodeEncodeError:  # a lone surrogate: no file system name
        return None
    if "/" in value or "\\" in value or "\0" in value or ".." in value or value == ".":
        return None
    return value


def _request_target(request, state, action: str) -> tuple[str, str]:
    """(model, filename) from the body; APIError (400, 404) when wrong."""
    body = parse_known_fields(request, state.config, SLOT_FIELDS) if (request.body or b"").strip() else {}
    model = state.text_model(body["model"]).name if "model" in body else next(
        name for name, served in state.models.items() if not served.is_audio)
    if action == "erase":
        return model, ""
    filename = plain_filename(body.get("filename"))
    if filename is None:
        raise APIError(400, "filename must be a plain file name (no path separator, '..' or NUL), not empty")
    return model, filename


async def slot_action(request, id_slot: int):
    state = request.app.ctx.state
    if not state.config.prefix_cache_dir:
        return _error(501, "slot files need the server started with --prefix-cache-dir", "not_supported_error")
    action = request.args.get("action", "")
    if action not in slot_files.ACTIONS:
        return _error(400, "action must be one of save, restore, erase")
    try:
        model, filename = _request_target(request, state, action)
        done = await slot_files.run(state.pool, model, action, id_slot, filename)
    except APIError as exc:
        return _error(exc.status, exc.message)
    except slot_files.SlotFileError as exc:
        return _slot_error(exc, state.config.retry_after_s)
    state.log.info("slot_file", action=action, id_slot=id_slot, n_tokens=done.n_tokens, n_bytes=done.n_bytes)
    if action == "erase":
        return _answer({"id_slot": id_slot, "n_erased": done.n_tokens})
    counts = {"save": ("n_saved", "n_written"), "restore": ("n_restored", "n_read")}[action]
    return _answer({"id_slot": id_slot, "filename": filename, counts[0]: done.n_tokens, counts[1]: done.n_bytes,
                    "timings": {f"{action}_ms": round(done.elapsed_ms, 3)}})
