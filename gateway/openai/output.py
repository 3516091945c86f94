"""How a chat/completions answer leaves: SSE events (gateway.openai.frames) or one JSON body.

Three ways a choice's text reaches the client: framed natively by the relay (plain streams),
re-framed by Python with tools (gateway.openai.tool_stream finds the calls in marked text), or
framed with its scores with logprobs/echo (gateway.openai.logprobs). The stream's last event
before `[DONE]` (the usage chunk, or without it the last finish chunk) carries the statistics of
gateway.serve.stats; a non-stream body carries `timings`.
"""
from __future__ import annotations

from gateway.openai.frames import DONE_EVENT, ChoiceResult, StreamFrames, non_stream_body
from gateway.openai.tool_stream import ToolStreamRewriter, tool_response_body
from gateway.serve.lanes import ScoredChunk
from gateway.serve.output import Output
from gateway.serve.stats import RequestStats


class OpenAIOutput(Output):
    headers = {"X-Laneserve-Streaming": "incremental"}

    def __init__(self, retry_after_s: int, frames: StreamFrames, num_choices: int, n_per_prompt: int, *,
                 tool_format=None, scores=None) -> None:
        super().__init__(retry_after_s)
        self.frames = frames
        self.n_per_prompt = n_per_prompt
        self.tool_format = tool_format
        self.scores = scores  # gateway.openai.logprobs.RequestScores (logprobs / echo)
        self.rewrite = None if tool_format is None else ToolStreamRewriter(frames, tool_format)
        self.direct = tool_format is None and scores is None
        self.results = [ChoiceResult([]) for _ in range(num_choices)]

    # --- stream --------------------------------------------------------------------------------
    def opening(self, first_choice: int, num_choices: int) -> bytes:
        if not self.frames.chat:
            return b""
        return b"".join(self.frames.role_event(first_choice + j) for j in range(num_choices))

    def chunk(self, choice: int, item) -> bytes:
        if type(item) is ScoredChunk:
            return self.scores.events(choice, item)
        return item.data if self.rewrite is None else self.rewrite.chunk(choice, item.data)

    def choice_done(self, choice: int, done, tracker, last: bool) -> bytes:
        frames = self.frames
        held = self.scores.final_events(choice) if self.scores is not None else b""
        reason = done.finish_reason
        if self.rewrite is not None:
            tail, reason = self.rewrite.finish(choice, reason)
            held += tail
        # Without a usage chunk the last finish chunk is the last event: the statistics go there.
        stats = RequestStats.from_tracker(tracker).openai_stream_fields() \
            if last and not frames.include_usage else None
        return held + frames.finish_event(choice, reason, stats)

    def end(self, tracker) -> bytes:
        if not self.frames.include_usage:
            return DONE_EVENT
        rec = tracker.record
        return self.frames.usage_event(rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens,
                                       RequestStats.from_tracker(tracker).openai_stream_fields()) + DONE_EVENT

    def error_frames(self, error) -> bytes:
        return error.sse_event() + DONE_EVENT

    # --- whole body ----------------------------------------------------------------------------
    def collect(self, choice: int, item) -> None:
        if type(item) is ScoredChunk:
            self.scores.collect(choice, item)

    def collect_done(self, choice: int, done) -> None:
        result = self.results[choice]
        result.finish_reason = done.finish_reason
        result.escaped.append(done.text)  # collected natively, already escaped
        result.reasoning.append(done.reasoning)

    def body(self, tracker) -> tuple[bytes, str]:
        frames, rec, results = self.frames, tracker.record, self.results
        if self.scores is not None:
            self.scores.fill(results)
        extra = RequestStats.from_tracker(tracker).openai_body_fields()
        if self.tool_format is not None:
            return tool_response_body(frames, results, rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens,
                                      extra, self.tool_format), "application/json"
        return non_stream_body(
            completion_id=frames.completion_id, created=frames.created, model=frames.model, chat=frames.chat,
            choices=results, prompt_tokens=rec.prompt_tokens, completion_tokens=rec.completion_tokens,
            cached_tokens=rec.cached_tokens, extra=extra), "application/json"
