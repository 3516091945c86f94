"""Which of a request's stop_sequences ended its answer (Anthropic's `stop_sequence`).

The lane does not say: its DONE record carries finish reason "stop" for the end-of-turn token and
for a stop string alike, and the text it sends ends just before the stop string (which is never
sent). So a request with stop_sequences asks the lane for each generated token's id (logprobs with
no alternatives: lanes.api.ScoredChunk), and the rule is:

  the lane stops at the token that completes a stop string, so a stop sequence matched exactly
  when one occurs in the decoded text of the last generated tokens *ending inside the last
  token's text*; among several, the one ending first (ties: the longest) — the lane's own rule
  (csrc/sampler/sampler.h StopMatcher). An answer that ended with the end-of-turn token (whose
  text is empty) or at the token limit matched none.
"""
from __future__ import annotations

TAIL_TOKENS = 32  # tokens decoded from the end: more than any stop string (256 characters at most) spans


def matched_stop(text, token_ids: list[int], stops: tuple[str, ...]) -> str | None:
    """`text`: the model's gateway.text.model_text.ModelText; token_ids: every generated token."""
    if not stops or not token_ids:
        return None
    last = text.decode(token_ids[-1:])
    if not last:
        return None  # the end-of-turn token (or a token of no text): no stop string completed
    tail = text.decode(token_ids[-TAIL_TOKENS:])
    last_starts = max(0, len(tail) - len(last))  # the match must end inside the last token's text
    best = None  # (end, -length, stop)
    for stop in stops:
        at = tail.find(stop, max(0, last_starts - len(stop) + 1))
        if at >= 0:
            candidate = (at + len(stop), -len(stop), stop)
            best = candidate if best is None or candidate < best else best
    return None if best is None else best[2]


def token_ids(chunk) -> list[int]:
    """The generated token ids a ScoredChunk scored (positions: ((token, logprob), alternatives))."""
    return [position[0][0] for position in chunk.positions[chunk.num_prompt:]]
