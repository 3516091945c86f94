"""A response's output items as the answer grows, with the stream events of each step.

Items, in output order: a `reasoning` item (thinking models), a `message` item with one
`output_text` part, `function_call` items (found in the text by gateway.features.tool_calls).
One item is open at a time; opening the next closes the last, as the events require:
  output_item.added → content_part.added → *.delta … → *.done → content_part.done → output_item.done
(function calls: output_item.added → function_call_arguments.delta … → .done → output_item.done).
A non-stream answer runs the same steps and drops the events, so both agree.
"""
from __future__ import annotations

from gateway.features.tool_calls import ToolCallParser
from gateway.responses.events import ResponseEvents, new_id

_PART = {"reasoning": "reasoning_text", "message": "output_text"}
_DELTA = {"reasoning": "response.reasoning_text.delta", "message": "response.output_text.delta"}
_DONE = {"reasoning": "response.reasoning_text.done", "message": "response.output_text.done"}


def _part(kind: str, text: str) -> dict:
    if kind == "message":
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "reasoning_text", "text": text}


class OutputItems:
    def __init__(self, events: ResponseEvents, tool_format=None) -> None:
        self.events = events
        self.items: list[dict] = []
        self._open: dict | None = None  # the item being written (its text accumulates in _text)
        self._text: list[str] = []
        self._parser = None if tool_format is None else ToolCallParser(tool_format)
        self._held = ""  # with tools: whitespace that would open a message item by itself

    @property
    def num_calls(self) -> int:
        return 0 if self._parser is None else self._parser.num_calls

    # --- opening and closing -------------------------------------------------------------------
    def _start(self, item: dict) -> bytes:
        out = self._close("completed")
        self._open, self._text = item, []
        self.items.append(item)
        out += self.events.event("response.output_item.added", output_index=len(self.items) - 1, item=dict(item))
        if item["type"] in _PART:
            out += self.events.event("response.content_part.added", item_id=item["id"],
                                     output_index=len(self.items) - 1, content_index=0,
                                     part=_part(item["type"], ""))
        return out

    def open_message(self) -> bytes:
        return self._start({"id": new_id("msg"), "type": "message", "status": "in_progress", "role": "assistant",
                            "content": []})

    def _close(self, status: str) -> bytes:
        item, self._open = self._open, None
        if item is None:
            return b""
        ev, index, kind = self.events, len(self.items) - 1, item["type"]
        out = b""
        if kind in _PART:
            text = "".join(self._text)
            part = _part(kind, text)
            extra = {"logprobs": []} if kind == "message" else {}
            out += ev.event(_DONE[kind], item_id=item["id"], output_index=index, content_index=0, text=text, **extra)
            out += ev.event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                            part=part)
            item["content"] = [part]
        else:  # function_call
            out += ev.event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                            arguments=item["arguments"])
        item["status"] = status
        return out + ev.event("response.output_item.done", output_index=index, item=item)

    def finish(self, status: str) -> bytes:
        """The answer ended: what the tool parser held back, then the open item closed."""
        out = b"" if self._parser is None else self._parsed(self._parser.finish())
        return out + self._close(status)

    # --- growing -------------------------------------------------------------------------------
    def _append(self, kind: str, text: str) -> bytes:
        out = b""
        if self._open is None or self._open["type"] != kind:
            out = self.open_message() if kind == "message" else self._start(
                {"id": new_id("rs"), "type": "reasoning", "summary": [], "content": [], "status": "in_progress"})
        self._text.append(text)
        extra = {"logprobs": []} if kind == "message" else {}
        return out + self.events.event(_DELTA[kind], item_id=self._open["id"], output_index=len(self.items) - 1,
                                       content_index=0, delta=text, **extra)

    def reasoning(self, text: str) -> bytes:
        return self._append("reasoning", text) if text else b""

    def text(self, text: str) -> bytes:
        if self._parser is None:
            return self._append("message", text) if text else b""
        return self._parsed(self._parser.feed(text))

    def set_text(self, text: str) -> None:
        """The open message's whole text (its deltas went out natively)."""
        self._text = [text]

    def _parsed(self, parsed: list[tuple]) -> bytes:
        out = b""
        for event in parsed:
            if event[0] == "content":
                text = self._held + event[1]
                if (self._open is None or self._open["type"] != "message") and not text.strip():
                    self._held = text  # whitespace between calls opens no message
                    continue
                self._held = ""
                out += self._append("message", text)
            elif event[0] == "call":
                out += self._start({"id": new_id("fc"), "type": "function_call", "status": "in_progress",
                                    "arguments": "", "call_id": event[2], "name": event[3]})
            elif event[0] == "arguments":
                self._open["arguments"] += event[2]
                out += self.events.event("response.function_call_arguments.delta", item_id=self._open["id"],
                                         output_index=len(self.items) - 1, delta=event[2])
            elif event[0] == "end":
                out += self._close("completed")
        return out
