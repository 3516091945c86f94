"""Ollama `logprobs` / `top_logprobs` (/api/chat, /api/generate): each streamed line carries
`"logprobs": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]` for the tokens
whose text it carries (the entry shape of OpenAI chat, which Ollama's API shares); the final
non-stream object carries all of them. Values and text/logprobs pairing as in gateway.openai.logprobs."""
from __future__ import annotations

from gateway.openai.logprobs import MAX_CHAT_TOP_LOGPROBS, chat_entries, token_strings
from gateway.ollama.frames import line


def ollama_logprobs(body: dict, bad) -> int | None:
    """`logprobs` (bool) + `top_logprobs` (0..20) → alternatives per token, or None (off)."""
    on = body.get("logprobs", False)
    top = body.get("top_logprobs")
    if on is None:
        on = False
    if type(on) is not bool:
        raise bad("logprobs must be true or false")
    if top is not None and (type(top) is not int or not 0 <= top <= MAX_CHAT_TOP_LOGPROBS):
        raise bad(f"top_logprobs must be an integer between 0 and {MAX_CHAT_TOP_LOGPROBS}")
    if top and not on:
        raise bad("top_logprobs requires logprobs to be true")
    return (top or 0) if on else None


class OllamaScores:
    """The ScoredChunks of one Ollama request: streamed lines, or the text and entries at the end."""

    def __init__(self, frames, model_text) -> None:
        self._frames = frames
        self._strings = token_strings(model_text)
        self._pending: list = []   # positions whose text has not come yet
        self._entries: list = []   # non-stream: every entry
        self._text: list = []
        self._thinking: list = []

    def _take(self, chunk) -> tuple[str, str, list]:
        self._pending.extend(chunk.positions[chunk.num_prompt:])
        content = chunk.content.decode("utf-8", errors="replace")
        thinking = chunk.reasoning.decode("utf-8", errors="replace")
        self._text.append(content)
        self._thinking.append(thinking)
        if not (content or thinking):
            return content, thinking, []
        positions, self._pending = self._pending, []
        return content, thinking, positions

    def line(self, chunk) -> bytes:
        """A streamed line for the chunk (b"" while its text is held back)."""
        content, thinking, positions = self._take(chunk)
        if not positions and not (content or thinking):
            return b""
        return self._line(content, thinking, positions)

    def _line(self, content: str, thinking: str, positions) -> bytes:
        obj = self._frames._partial(content, thinking or None)
        obj["logprobs"] = chat_entries(positions, self._strings)
        return line(obj)

    def held_line(self) -> bytes:
        """Tokens whose text never came (a stop string's end), before the final line."""
        positions, self._pending = self._pending, []
        return self._line("", "", positions) if positions else b""

    def collect(self, chunk) -> None:
        self._entries.extend(chat_entries(self._take(chunk)[2], self._strings))

    def text(self) -> str:
        return "".join(self._text)

    def thinking(self) -> str:
        return "".join(self._thinking)

    def all_entries(self) -> list:
        return self._entries + chat_entries(self._pending, self._strings)
