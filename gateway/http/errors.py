"""OpenAI error envelopes: one exception type carries everything a response needs.

Messages are written by us and never echo raw user bytes (llama.cpp #9195: invalid UTF-8 echoed
into an error body crashed the server); `safe_repr` is the only way user text enters a message.
"""
from __future__ import annotations

import re

import orjson

_SAFE_TEXT = re.compile(r"^[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,63}$")  # no "/", no leading "."


def safe_repr(value: object) -> str:
    """Quote a user-supplied value only when it is short and plain; otherwise describe it."""
    if isinstance(value, str) and _SAFE_TEXT.match(value):
        return repr(value)
    return f"<{type(value).__name__}>"


class APIError(Exception):
    """An error answer: HTTP status + OpenAI envelope (+ optional headers such as Retry-After)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = headers or {}

    def envelope(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def body(self) -> bytes:
        return orjson.dumps(self.envelope())

    def sse_event(self) -> bytes:
        """The in-band form once a stream has started: the error object is the terminal frame."""
        return b"data: " + self.body() + b"\n\n"


def invalid(message: str, param: str | None = None, code: str | None = "invalid_value") -> APIError:
    return APIError(400, message, param=param, code=code)


def model_not_found(requested: object) -> APIError:
    return APIError(
        404,
        f"The model {safe_repr(requested)} does not exist",
        code="model_not_found",
        param="model",
    )


def server_busy(retry_after_s: int, model: str, detail: str = "its queue is full") -> APIError:
    return APIError(
        429,
        f"Every sequence slot of model {model!r} is taken and {detail}; retry shortly",
        type="rate_limit_error",
        code="server_busy",
        headers={"Retry-After": str(retry_after_s)},
    )


def unavailable(message: str, retry_after_s: int, code: str = "unavailable") -> APIError:
    return APIError(
        503, message, type="unavailable_error", code=code, headers={"Retry-After": str(retry_after_s)}
    )


def internal(message: str = "internal server error", code: str = "internal_error") -> APIError:
    return APIError(500, message, type="server_error", code=code)


def load_failed(model: str, reason: str) -> APIError:
    """A model that cannot be served: its file or its lanes failed to load (models on demand)."""
    return APIError(503, f"model {model!r} could not be loaded: {reason}", type="server_error",
                    code="model_load_failed")
