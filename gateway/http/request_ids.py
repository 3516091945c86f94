"""X-Request-ID rules (as TensorRT-LLM-style servers handle it).

A valid incoming id (1-128 of [A-Za-z0-9._:-]) is kept and echoed; an absent one is generated;
an invalid id, the header sent twice, or an id equal to one still in flight is a 400. An id seen
before but no longer in flight is fine: openai-python re-sends its headers when it retries.
"""
from __future__ import annotations

import re
import uuid

from gateway.http.errors import invalid

HEADER = "X-Request-ID"
_VALID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def new_request_id() -> str:
    return uuid.uuid4().hex


def resolve_request_id(header_values: list[str]) -> str:
    """The request's id from its X-Request-ID header values; raises the 400 APIError if invalid."""
    if not header_values:
        return new_request_id()
    if len(header_values) > 1:
        raise invalid("X-Request-ID header sent more than once", param="X-Request-ID", code="invalid_request_id")
    if not _VALID.match(header_values[0]):
        raise invalid("X-Request-ID must be 1-128 characters of A-Z a-z 0-9 . _ : -",
                      param="X-Request-ID", code="invalid_request_id")
    return header_values[0]


class InFlightIds:
    """Ids of generation requests being served (one event loop: no locking needed)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def claim(self, request_id: str) -> None:
        if request_id in self._ids:
            raise invalid("X-Request-ID is already in use by a request in flight", param="X-Request-ID",
                          code="duplicate_request_id")
        self._ids.add(request_id)

    def release(self, request_id: str) -> None:
        self._ids.discard(request_id)

    def __len__(self) -> int:
        return len(self._ids)
