"""POST /stop and DELETE /v1/requests/{request_id}: cancel generation requests (gateway.serve.control).

* `POST /stop` — body optional: `{"model": "NAME"}` cancels that model's requests, no body (or
  `{}` / `{"model": null}`) every model's; queued and running, streamed or not. → 200
  `{"cancelled": [X-Request-ID, ...], "count": N}`; an unknown model → 404 `model_not_found`.
* `DELETE /v1/requests/{request_id}` — one request by its X-Request-ID → 200
  `{"id": ..., "cancelled": true}`; an id not queued or running (unknown, finished, or whose
  lane already produced every token) → 404 `request_not_found`.
"""
from __future__ import annotations

import orjson
from sanic.response import HTTPResponse

from gateway.http.body import parse_known_fields
from gateway.http.errors import APIError, safe_repr
from gateway.http.fields import get_str

STOP_FIELDS = {"model": {"type": ["string", "null"], "maxLength": 256,
                         "description": "cancel this model's requests; absent or null: every model's"}}


def _json(payload: dict) -> HTTPResponse:
    return HTTPResponse(orjson.dumps(payload), status=200, content_type="application/json")


async def stop(request):
    state = request.app.ctx.state
    model = None
    if request.body and request.body.strip():
        body = parse_known_fields(request, state.config, STOP_FIELDS)
        requested = get_str(body, "model", None, 256)
        if requested is not None:
            model = state.model(requested).name  # 404 model_not_found
    cancelled = state.control.cancel_all(model)
    state.log.info("stop", model=state.model_label(model) if model else None, count=len(cancelled))
    return _json({"cancelled": cancelled, "count": len(cancelled)})


async def cancel_request(request, request_id: str):
    state = request.app.ctx.state
    if not state.control.cancel(request_id):
        raise APIError(404, f"no queued or running request has the id {safe_repr(request_id)}",
                       param="request_id", code="request_not_found")
    state.log.info("request_cancel", request_id=request_id)
    return _json({"id": request_id, "cancelled": True})
