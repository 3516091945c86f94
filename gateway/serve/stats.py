"""Generation statistics of one request, in each protocol's shape — computed once from the
RequestTracker (token counts from the lanes' DONE records, lane-measured prefill/decode times,
gateway-measured arrival and first-token times).

* OpenAI streams: `ttft`, `tps`, `generated_tokens` (SiMa GenAIServer) and `timings`
  (llama-server) on the last event before `[DONE]`; non-stream bodies: `timings`.
* Ollama final line: `total_duration`, `load_duration`, `prompt_eval_count`,
  `prompt_eval_duration`, `eval_count`, `eval_duration` (integer ns).

Definitions (n > 1 choices or several prompts: prompt processing counts once per prompt — the
slowest choice of it — and decode time is summed over choices, so `tps` stays a per-sequence
decode speed, like one llama-server slot's):
* prompt processing = lane slot taken → first token sampled (lane clock);
* decode = first token → last token sampled, summed over choices (lane clock);
* ttft = request arrival → first content relayed to the client (stream) or → first token
  sampled (non-stream, or a stream without content);
* tps = generated tokens / decode seconds (0 when decode took no time: one token).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

_NS_PER_MS = 1e6
_NS_PER_S = 1e9


@dataclass(frozen=True)
class RequestStats:
    prompt_tokens: int       # whole prompts (usage.prompt_tokens)
    cached_tokens: int       # of which served from the prefix cache
    generated_tokens: int    # usage.completion_tokens
    prefill_ns: int
    decode_ns: int
    ttft_ns: int | None      # None: no token yet
    total_ns: int            # arrival → when the stats were taken

    @classmethod
    def from_tracker(cls, tracker) -> "RequestStats":
        start_ns, admitted_ns, prefill_ns, decode_ns = tracker.timing_ns()
        rec = tracker.record
        if rec.ttft_ms is not None:
            ttft_ns = int(rec.ttft_ms * _NS_PER_MS)
        elif admitted_ns is not None and rec.n_choices:
            ttft_ns = admitted_ns - start_ns + prefill_ns
        else:
            ttft_ns = None
        return cls(prompt_tokens=rec.prompt_tokens, cached_tokens=rec.cached_tokens,
                   generated_tokens=rec.completion_tokens, prefill_ns=prefill_ns, decode_ns=decode_ns,
                   ttft_ns=ttft_ns, total_ns=time.perf_counter_ns() - start_ns)

    # --- derived --------------------------------------------------------------------------
    @property
    def computed_prompt_tokens(self) -> int:
        """Prompt tokens the lane ran through the model (not served from the cache)."""
        return max(0, self.prompt_tokens - self.cached_tokens)

    @property
    def tps(self) -> float:
        return _per_second(self.generated_tokens, self.decode_ns)

    # --- shapes ---------------------------------------------------------------------------
    def timings(self) -> dict:
        """llama-server's `timings` object (tools/server: result_timings::to_json)."""
        prompt_n, predicted_n = self.computed_prompt_tokens, self.generated_tokens
        prompt_ms, predicted_ms = self.prefill_ns / _NS_PER_MS, self.decode_ns / _NS_PER_MS
        return {
            "cache_n": self.cached_tokens,
            "prompt_n": prompt_n,
            "prompt_ms": round(prompt_ms, 3),
            "prompt_per_token_ms": round(prompt_ms / prompt_n, 3) if prompt_n else 0.0,
            "prompt_per_second": round(_per_second(prompt_n, self.prefill_ns), 3),
            "predicted_n": predicted_n,
            "predicted_ms": round(predicted_ms, 3),
            "predicted_per_token_ms": round(predicted_ms / predicted_n, 3) if predicted_n else 0.0,
            "predicted_per_second": round(self.tps, 3),
        }

    def openai_stream_fields(self) -> dict:
        """Extra top-level fields of an OpenAI stream's last event (clients ignore unknown keys)."""
        return {
            "ttft": round(self.ttft_ns / _NS_PER_S, 6) if self.ttft_ns is not None else None,
            "tps": round(self.tps, 3),
            "generated_tokens": self.generated_tokens,
            "timings": self.timings(),
        }

    def openai_body_fields(self) -> dict:
        """Extra top-level fields of an OpenAI non-stream body (llama-server adds `timings`)."""
        return {"timings": self.timings()}

    def ollama_fields(self) -> dict:
        """Ollama's final-line durations (integer ns). Models stay loaded: load_duration is 0."""
        return {
            "total_duration": self.total_ns,
            "load_duration": 0,
            "prompt_eval_count": self.prompt_tokens,
            "prompt_eval_duration": self.prefill_ns,
            "eval_count": self.generated_tokens,
            "eval_duration": self.decode_ns,
            # the seed server's stream statistics; Ollama clients ignore unknown keys
            "ttft": round(self.ttft_ns / _NS_PER_S, 6) if self.ttft_ns is not None else None,
            "tps": round(self.tps, 3),
        }


def _per_second(count: int, ns: int) -> float:
    return count * _NS_PER_S / ns if ns > 0 else 0.0
