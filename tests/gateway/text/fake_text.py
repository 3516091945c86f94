"""A stand-in for gateway.text.model_text.ModelText with just what the prompt builders use
(gateway.features.reasoning, gateway.features.chat_prompt): a real ChatTemplate, no tokenizer —
token ids are the rendered text's code points."""
from __future__ import annotations

from gateway.features.reasoning import thinking_markers
from gateway.text.chat_template import ChatTemplate


class FakeText:
    def __init__(self, source: str) -> None:
        self.template = ChatTemplate(source)
        self.thinking_markers = thinking_markers(source)
        self.tool_format = None
        self.rendered = None  # the last rendering

    def render_chat(self, messages, kwargs):
        self.rendered = self.template.render(messages, kwargs)
        return self.rendered

    def encode_rendered(self, rendered):
        return [ord(c) for c in rendered]
