"""Request control: cancel in-flight and queued generation requests from outside their handler
(`POST /stop`, `DELETE /v1/requests/{id}`; routes in gateway/serve/control_routes.py).

A protocol handler registers each generation request under its X-Request-ID once the request has
a Generation (from admission on, queued or running) and unregisters it when it ends:

    state.control.register(request_id, model, generation.abort)
    try: ... finally: state.control.unregister(request_id)

The callback runs on the event loop and returns whether there was anything left to cancel
(False: the lane already finished the request and its answer is being completed). The handler
decides the terminal answer: Generation raises GenerationCancelled (code `request_cancelled`) out
of `start()` (still queued: nothing sent yet) or out of `segments()` (running); OpenAI routes turn
it into `cancelled_error()` — HTTP 499 before the response started, else an in-band SSE error
event + `data: [DONE]` — and record outcome `cancelled`.
Single-threaded: everything runs on the serving event loop.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from gateway.http.errors import APIError

CANCELLED_CODE = "request_cancelled"
CANCELLED_STATUS = 499  # "Client Closed Request": gRPC CANCELLED's HTTP mapping; not retried by openai-python


def cancelled_error() -> APIError:
    """The answer of a cancelled request (status used only when nothing was sent yet)."""
    return APIError(CANCELLED_STATUS, "the request was cancelled (POST /stop or DELETE /v1/requests/{id})",
                    type="cancelled_error", code=CANCELLED_CODE, headers={"x-should-retry": "false"})


def outcome_for(status: int, code: str | None) -> str:
    """Record/metric outcome of a request that ended with an error answer: `saturated` for a
    refusal because every slot and the queue were taken (429, or Ollama's 503 `server_busy`)."""
    if code == CANCELLED_CODE:
        return "cancelled"
    return "saturated" if status == 429 or code == "server_busy" else "error"


@dataclass(frozen=True)
class _Entry:
    model: str
    cancel: Callable[[], bool]


class RequestControl:
    """X-Request-ID → cancel callback of every registered (queued or running) request."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def register(self, request_id: str, model: str, cancel: Callable[[], bool]) -> None:
        # InFlightIds already refuses a duplicate id in flight, so an id maps to one request.
        self._entries[request_id] = _Entry(model, cancel)

    def unregister(self, request_id: str) -> None:
        self._entries.pop(request_id, None)

    def cancel(self, request_id: str) -> bool:
        """True when the request was registered and had something left to cancel."""
        entry = self._entries.get(request_id)
        return entry is not None and entry.cancel()

    def cancel_all(self, model: str | None = None) -> list[str]:
        """Cancel every registered request (of `model`); the ids actually cancelled, in
        registration order."""
        # A snapshot: callbacks may end requests, and their handlers unregister later, not now.
        chosen = [(rid, e) for rid, e in self._entries.items() if model is None or e.model == model]
        return [rid for rid, entry in chosen if entry.cancel()]

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._entries
