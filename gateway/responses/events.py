"""One response's object and its stream events, as the openai client parses them.

Every event is `event: <type>` + `data: {"type", "sequence_number", ...}`; `sequence_number`
counts every event of the response from 0. Text deltas of a plain answer are framed natively
(`text_framing`: the relay writes the number, lanes.api.NumberedFraming), so the count is shared:
the opening events take 0..k-1, the relay k.., and the closing events continue from where the
lane stream says the count stands (RequestStream.next_number).
"""
from __future__ import annotations

import time
import uuid

import orjson

from gateway.serve.lanes import CONTENT, NumberedFraming

_MARK = "\x00laneserve-split\x00"  # cannot occur in an encoded event except where we put it


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict:
    return {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + completion_tokens}


class ResponseEvents:
    def __init__(self, model: str, echo: dict, previous_response_id: str | None, store: bool) -> None:
        self.response_id = new_id("resp")
        self.created_at = int(time.time())
        self.model = model
        self.echo = echo
        self.previous_response_id = previous_response_id
        self.store = store
        self.seq = 0  # the next event's sequence_number

    def response(self, status: str, output: list, *, usage: dict | None = None, incomplete: str | None = None,
                 error: dict | None = None) -> dict:
        return {
            "id": self.response_id, "object": "response", "created_at": self.created_at, "status": status,
            "background": False, "error": error,
            "incomplete_details": None if incomplete is None else {"reason": incomplete},
            "model": self.model, "output": output, "previous_response_id": self.previous_response_id,
            "store": self.store, **self.echo, "usage": usage,
            **({"completed_at": int(time.time())} if status == "completed" else {}),
        }

    def event(self, kind: str, **fields) -> bytes:
        data = orjson.dumps({"type": kind, "sequence_number": self.seq, **fields})
        self.seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"

    def text_framing(self, item_id: str, output_index: int) -> NumberedFraming:
        """The relay's framing of the message's text deltas, numbered on from this event."""
        fields = {"type": "response.output_text.delta", "sequence_number": 0, "item_id": item_id,
                  "output_index": output_index, "content_index": 0, "delta": _MARK, "logprobs": []}
        encoded = orjson.dumps(fields)
        head, tail = encoded.split(orjson.dumps(_MARK)[1:-1], 1)
        number_at = head.index(b'"sequence_number":0') + len(b'"sequence_number":')
        prefix = b"event: response.output_text.delta\ndata: " + head[:number_at]
        return NumberedFraming(0, CONTENT, prefix, head[number_at + 1:], tail + b"\n\n", self.seq)
