"""Stored responses (`store: true`, the default): GET / DELETE /v1/responses/{id} and the
conversations `previous_response_id` continues.

In memory and bounded three ways: at most `max_entries` responses (the oldest goes first), none
older than `max_age_s`, and at most `max_image_bytes` of image payloads counted over the stored
conversations (each response counts every image of its conversation, the earlier turns' too: an
image shared along a chain is counted more than once, never less). A response is stored once it
has ended (completed, incomplete or failed); a server restart forgets them all. Not thread-safe:
the event loop owns it.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass


# The conversations' images stay in memory with them (previous_response_id sends them to the model again).
MAX_STORED_IMAGE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class StoredResponse:
    body: dict                  # the response object as the API returned it
    messages: tuple[dict, ...]  # the whole conversation in chat form, this response's output included
    stored_ns: int
    images: tuple = ()          # the conversation's gateway.vision.parts.RequestImages (markers in messages)

    @property
    def image_bytes(self) -> int:
        return sum(len(im.data) for im in self.images)


class ResponseStore:
    def __init__(self, max_entries: int, max_age_s: float, max_image_bytes: int = MAX_STORED_IMAGE_BYTES) -> None:
        self.max_entries = max_entries
        self.max_age_ns = int(max_age_s * 1e9)
        self.max_image_bytes = max_image_bytes
        self._image_bytes = 0
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
            self._pop_oldest()

    def _pop_oldest(self) -> None:
        _, entry = self._entries.popitem(last=False)
        self._image_bytes -= entry.image_bytes

    def _remove(self, response_id: str) -> bool:
        entry = self._entries.pop(response_id, None)
        if entry is not None:
            self._image_bytes -= entry.image_bytes
        return entry is not None

    def put(self, response_id: str, body: dict, messages: tuple[dict, ...], images: tuple = ()) -> None:
        entry = StoredResponse(body, messages, time.monotonic_ns(), images)
        if self.max_entries <= 0 or entry.image_bytes > self.max_image_bytes:
            return
        self._remove(response_id)
        self._entries[response_id] = entry
        self._image_bytes += entry.image_bytes
        while len(self._entries) > self.max_entries or self._image_bytes > self.max_image_bytes:
            self._pop_oldest()

    def get(self, response_id: str) -> StoredResponse | None:
        self._expire()
        return self._entries.get(response_id)

    def delete(self, response_id: str) -> bool:
        self._expire()
        return self._remove(response_id)
