"""Stored responses (`store: true`, the default): GET / DELETE /v1/responses/{id} and the
conversations `previous_response_id` continues.

In memory and bounded both ways: at most `max_entries` responses (the oldest goes first) and
none older than `max_age_s`. A response is stored once it has ended (completed, incomplete or
failed); a server restart forgets them all. Not thread-safe: the event loop owns it.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class StoredResponse:
    body: dict                  # the response object as the API returned it
    messages: tuple[dict, ...]  # the whole conversation in chat form, this response's output included
    stored_ns: int


class ResponseStore:
    def __init__(self, max_entries: int, max_age_s: float) -> None:
        self.max_entries = max_entries
        self.max_age_ns = int(max_age_s * 1e9)
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    def __len__(self) -> int:
        self._expire()
        return len(self._entries)

    def _expire(self) -> None:
        oldest_ns = time.monotonic_ns() - self.max_age_ns
        while self._entries:
            first = next(iter(self._entries.values()))
            if first.stored_ns >= oldest_ns:
                break
            self._entries.popitem(last=False)

    def put(self, response_id: str, body: dict, messages: tuple[dict, ...]) -> None:
        if self.max_entries <= 0:
            return
        self._entries.pop(response_id, None)
        self._entries[response_id] = StoredResponse(body, messages, time.monotonic_ns())
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse | None:
        self._expire()
        return self._entries.get(response_id)

    def delete(self, response_id: str) -> bool:
        self._expire()
        return self._entries.pop(response_id, None) is not None
