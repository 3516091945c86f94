"""Log-probabilities in OpenAI responses: chat `logprobs`/`top_logprobs`, completions `logprobs`
and `echo` (with `max_tokens: 0`: score a prompt without generating).

The lane scores positions from the raw logits of the same forward pass (log-softmax before
logit_bias, penalties, temperature and filters, as OpenAI and vLLM report) and sends them with
the text released at the same step (lanes.api.ScoredChunk). Requests with logprobs therefore skip
the native delta relay: this module frames their chunks in Python. A token's logprobs go out in
the chunk that carries its text; a token whose text the lane held back (UTF-8 split across
tokens, a possible stop-string prefix) rides with the chunk that releases it, and tokens whose
text never appears (the end of a stop string) go in one last content chunk before the finish.

Shapes (exactly OpenAI's):
* chat: `choices[i].logprobs = {"content": [{token, logprob, bytes, top_logprobs: [{token,
  logprob, bytes}]}]}` — `bytes` the token's exact UTF-8 bytes (a token holding part of a
  character still has its own bytes; its `token` string shows U+FFFD for the partial part);
* completions: `choices[i].logprobs = {tokens, token_logprobs, top_logprobs: [{token: logprob}],
  text_offset}` — top_logprobs holds the `logprobs` most likely tokens plus the chosen one (so
  up to logprobs + 1 entries, as OpenAI documents); with `echo` the prompt's tokens come first,
  the first with `null` logprob and top_logprobs (nothing precedes it); text_offset counts
  characters of the returned text.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from gateway.http.errors import invalid
from gateway.http.fields import get_bool, get_int

MAX_CHAT_TOP_LOGPROBS = 20
MAX_COMPLETION_LOGPROBS = 5


# --- request fields ---------------------------------------------------------------------------
def chat_top_logprobs(body: dict) -> int | None:
    """Chat `logprobs` (bool) + `top_logprobs` (0..20) → alternatives per token, or None (off)."""
    on = get_bool(body, "logprobs", False)
    top = get_int(body, "top_logprobs", None, 0, MAX_CHAT_TOP_LOGPROBS)
    if top and not on:  # 0 alone is a no-op value, accepted
        raise invalid("'top_logprobs' requires 'logprobs' to be true", param="top_logprobs")
    return (top or 0) if on else None


def completion_logprobs(body: dict) -> int | None:
    """Completions `logprobs` (0..5): alternatives per token, or None (off)."""
    return get_int(body, "logprobs", None, 0, MAX_COMPLETION_LOGPROBS)


def completion_echo(body: dict, max_tokens: int) -> bool:
    """`echo` (bool); `max_tokens: 0` is only meaningful with it (score the prompt, generate
    nothing — what evaluation harnesses send); without echo it is a 400, as on vLLM."""
    echo = get_bool(body, "echo", False)
    if max_tokens == 0 and not echo:
        raise invalid("'max_tokens' must be at least 1 (0 is allowed only with 'echo' to score the prompt)",
                      param="max_tokens")
    return echo


# --- token strings ----------------------------------------------------------------------------
class TokenStrings:
    """Token id → (text, UTF-8 bytes as a list of ints), from the model's own token pieces (the
    bytes the lane's text is made of), cached per model."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def __call__(self, token: int) -> tuple[str, list[int]]:
        hit = self._cache.get(token)
        if hit is None:
            raw = bytes(self._tokenizer.piece(token, False))
            hit = self._cache[token] = (raw.decode("utf-8", errors="replace"), list(raw))
        return hit


def chat_entries(positions, strings: TokenStrings) -> list[dict]:
    out = []
    for (token, logprob), alts in positions:
        text, raw = strings(token)
        top = []
        for alt, alt_logprob in alts:
            alt_text, alt_raw = strings(alt)
            top.append({"token": alt_text, "logprob": alt_logprob, "bytes": alt_raw})
        out.append({"token": text, "logprob": logprob, "bytes": raw, "top_logprobs": top})
    return out


def completion_logprobs_object(positions, strings: TokenStrings, offset: int) -> tuple[dict, int]:
    """(the completions logprobs object of positions whose text starts at character `offset`,
    the offset after them)."""
    tokens, token_logprobs, tops, offsets = [], [], [], []
    for (token, logprob), alts in positions:
        text, _ = strings(token)
        tokens.append(text)
        token_logprobs.append(logprob)
        offsets.append(offset)
        offset += len(text)
        if logprob is None:
            tops.append(None)
            continue
        top = {}
        for alt, alt_logprob in alts:
            top.setdefault(strings(alt)[0], alt_logprob)
        top.setdefault(text, logprob)
        tops.append(top)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": tops, "text_offset": offsets}, offset


# --- one request's scored output --------------------------------------------------------------
@dataclass
class _Choice:
    echo_text: str | None       # completions echo: the prompt text, sent once its positions are in
    num_prompt_ids: int
    prompt: list = field(default_factory=list)   # scored prompt positions not yet sent
    pending: list = field(default_factory=list)  # scored generated positions waiting for their text
    echo_sent: bool = False
    offset: int = 0             # completions text_offset of the next token
    texts: list = field(default_factory=list)     # non-stream: (content, reasoning, positions) segments


class RequestScores:
    """Frames (stream) or accumulates (non-stream) the ScoredChunks of one request.

    report: include logprobs in the response (False: an echo request without logprobs, which is
    scored only so the lane can serve max_tokens 0 and the echo the same way)."""

    def __init__(self, frames, strings: TokenStrings, *, report: bool, choices: list[tuple[str | None, int]]) -> None:
        self._frames = frames
        self._strings = strings
        self._report = report
        self._choices = [_Choice(echo, n) for echo, n in choices]

    # -- segments: (content text, reasoning text, positions) in client order --------------
    def _segments(self, index: int, chunk) -> list[tuple[str, str, list]]:
        c = self._choices[index]
        out = []
        positions = chunk.positions
        if chunk.num_prompt:
            c.prompt.extend(positions[:chunk.num_prompt])
            positions = positions[chunk.num_prompt:]
        if c.echo_text is not None and not c.echo_sent and len(c.prompt) >= c.num_prompt_ids:
            out.append(self._echo(c))
        c.pending.extend(positions)
        content = chunk.content.decode("utf-8", errors="replace")
        reasoning = chunk.reasoning.decode("utf-8", errors="replace")
        if content or reasoning:
            out.append((content, reasoning, c.pending))
            c.pending = []
        return out

    def _echo(self, c: _Choice) -> tuple[str, str, list]:
        c.echo_sent = True
        prompt, c.prompt = c.prompt, []
        return c.echo_text, "", prompt

    def _final_segments(self, index: int) -> list[tuple[str, str, list]]:
        c = self._choices[index]
        out = []
        if c.echo_text is not None and not c.echo_sent:
            out.append(self._echo(c))
        if c.pending:
            out.append(("", "", c.pending))
            c.pending = []
        return out

    def _logprobs(self, c: _Choice, positions) -> dict | None:
        if not self._report:
            return None
        if self._frames.chat:
            return {"content": chat_entries(positions, self._strings)}
        obj, c.offset = completion_logprobs_object(positions, self._strings, c.offset)
        return obj

    # -- stream ----------------------------------------------------------------------------
    def _event(self, index: int, content: str, reasoning: str, positions) -> bytes:
        c = self._choices[index]
        logprobs = self._logprobs(c, positions)
        if self._frames.chat:
            delta = {"content": content}
            if reasoning:
                delta.update(reasoning_content=reasoning, reasoning=reasoning)
            choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}
        else:
            choice = {"index": index, "text": content, "logprobs": logprobs, "finish_reason": None}
        return self._frames.choice_event(choice)

    def events(self, index: int, chunk) -> bytes:
        """SSE events for one ScoredChunk of choice `index` (b"" while its text is held back)."""
        return b"".join(self._event(index, *seg) for seg in self._segments(index, chunk))

    def final_events(self, index: int) -> bytes:
        """What is still held for the choice, sent before its finish chunk."""
        return b"".join(self._event(index, *seg) for seg in self._final_segments(index))

    # -- non-stream ------------------------------------------------------------------------
    def collect(self, index: int, chunk) -> None:
        self._choices[index].texts.extend(self._segments(index, chunk))

    def fill(self, results) -> None:
        """Puts each choice's text, reasoning and logprobs into its gateway.openai.frames.ChoiceResult."""
        for index, result in enumerate(results):
            c = self._choices[index]
            segments = c.texts + self._final_segments(index)
            content = "".join(s[0] for s in segments)
            reasoning = "".join(s[1] for s in segments)
            result.escaped = [orjson.dumps(content)[1:-1]]
            result.reasoning = [orjson.dumps(reasoning)[1:-1]] if reasoning else []
            result.logprobs = self._logprobs(c, [p for s in segments for p in s[2]])


def token_strings(model_text) -> TokenStrings:
    """The model's TokenStrings (one cache per gateway.text.model_text.ModelText)."""
    strings = getattr(model_text, "_token_strings", None)
    if strings is None:
        strings = model_text._token_strings = TokenStrings(model_text.tokenizer)
    return strings


def request_scores(frames, model_text, parsed, prompts: list[list[int]]) -> RequestScores:
    """The RequestScores of a chat/completions request with logprobs or echo; prompts: the token
    ids per prompt (choice group), in order."""
    echo = getattr(parsed, "echo", False)
    n = parsed.sampling.n
    choices = []
    for p, ids in enumerate(prompts):
        text = None
        if echo:
            prompt = parsed.prompts[p]
            text = prompt if isinstance(prompt, str) else model_text.decode(list(ids))
        choices += [(text, len(ids))] * n
    return RequestScores(frames, token_strings(model_text), report=parsed.sampling.logprobs is not None,
                         choices=choices)
