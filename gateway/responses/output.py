"""How a Responses API answer leaves: its stream events, or the response object; stored at the end.

Two ways a stream's text reaches the client:
  native  — a plain answer (no tools, no thinking): the message item is opened with the stream,
            the relay frames and numbers each text delta (ResponseEvents.text_framing), and the
            closing events carry on from the lane stream's count;
  framed  — with tools or thinking, item boundaries depend on the text: the lane marks each delta
            with its channel (gateway.serve.output.marked_pieces) and gateway.responses
            .items turns it into items and events.
"""
from __future__ import annotations

import orjson

from gateway.http.errors import APIError
from gateway.responses.events import ResponseEvents, usage
from gateway.responses.items import OutputItems
from gateway.responses.store import ResponseStore
from gateway.serve.output import Output, marked_pieces, unescape

def _chat_turn(items: list[dict]) -> dict:
    """The answer as an assistant turn of the conversation (previous_response_id continues it)."""
    text = "".join(p["text"] for item in items if item["type"] == "message" for p in item["content"])
    calls = [{"id": item["call_id"], "type": "function",
              "function": {"name": item["name"], "arguments": item["arguments"]}}
             for item in items if item["type"] == "function_call"]
    return {"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}


class ResponsesOutput(Output):
    def __init__(self, retry_after_s: int, events: ResponseEvents, *, stream: bool, framed: bool, tool_format,
                 store: ResponseStore | None, conversation: tuple[dict, ...], images: tuple = ()) -> None:
        super().__init__(retry_after_s)
        self.events = events
        self.items = OutputItems(events, tool_format)
        self.direct = not framed
        self.store = store  # None: store is false
        self.conversation = conversation
        self.images = images  # the conversation's images, kept with it for previous_response_id
        self.stream = None  # the lane stream (its event count)
        self.finish_reason = "stop"
        self._created = events.response("in_progress", [])
        # Rendered now for a stream: a plain answer's message item id and event count go into the
        # relay's framing. A whole body opens its message when the text arrives (collect_done).
        self._opening = b""
        if stream:
            self._opening = events.event("response.created", response=self._created) + \
                events.event("response.in_progress", response=self._created) + \
                (self.items.open_message() if self.direct else b"")
        self._opened = False  # the opening went out (else an error ends the stream before it)

    def _status(self) -> tuple[str, str | None]:
        if self.finish_reason == "length":
            return "incomplete", "max_output_tokens"
        return "completed", None

    def _final(self, tracker) -> dict:
        status, incomplete = self._status()
        rec = tracker.record
        body = self.events.response(status, self.items.items, incomplete=incomplete,
                                    usage=usage(rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens))
        self._keep(body)
        return body

    def _keep(self, body: dict) -> None:
        if self.store is not None:
            turn = _chat_turn(self.items.items)
            self.store.put(body["id"], body, self.conversation + (turn,), self.images)

    # --- stream --------------------------------------------------------------------------------
    def segment(self, offset: int, stream) -> None:
        self.stream = stream

    def opening(self, first_choice: int, num_choices: int) -> bytes:
        self._opened = True
        return self._opening

    def text_framing(self):
        """The relay's framing of a plain answer's deltas, numbered on after the opening."""
        return self.events.text_framing(self.items.items[0]["id"], 0)

    def chunk(self, choice: int, item) -> bytes:
        if self.direct:
            return item.data  # framed and numbered by the relay, came the queued way
        return b"".join(self.items.reasoning(text) if reasoning else self.items.text(text)
                        for reasoning, text in marked_pieces(item.data))

    def choice_done(self, choice: int, done, tracker, last: bool) -> bytes:
        self.finish_reason = done.finish_reason
        if self.direct:
            self.events.seq = done.next_number
            self.items.set_text(unescape(done.text))
        status, _ = self._status()
        return self.items.finish(status)

    def end(self, tracker) -> bytes:
        body = self._final(tracker)
        kind = "response.completed" if body["status"] == "completed" else "response.incomplete"
        return self.events.event(kind, response=body)

    def error_frames(self, error: APIError) -> bytes:
        ev = self.events
        head = b""
        if not self._opened:  # ended while queued: the client still needs response.created first
            ev.seq, self.items.items = 0, []
            head = ev.event("response.created", response=self._created)
        elif self.direct and self.stream is not None:
            ev.seq = max(ev.seq, self.stream.next_number())
        detail = {"code": error.code or "server_error", "message": error.message}
        body = ev.response("failed", self.items.items, error=detail)
        self._keep(body)
        return head + ev.event("error", **detail, param=None) + ev.event("response.failed", response=body)

    # --- whole body ----------------------------------------------------------------------------
    def collect_done(self, choice: int, done) -> None:
        self.finish_reason = done.finish_reason
        if done.reasoning:
            self.items.reasoning(unescape(done.reasoning))
        self.items.text(unescape(done.text))
        if not self.items.items:
            self.items.open_message()  # an empty answer is an empty message
        self.items.finish(self._status()[0])

    def body(self, tracker) -> tuple[bytes, str]:
        return orjson.dumps(self._final(tracker)), "application/json"
