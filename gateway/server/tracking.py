"""Per-request accounting: timings, token counts and the terminal outcome, written once to
the records file, the metrics and the log (ids, numbers and codes only — never text)."""
from __future__ import annotations

import asyncio
import contextlib
import time

from gateway.serve.control import outcome_for
from gateway.http.errors import APIError
from gateway.server.records import RequestRecord


# How long a cancelled request's record waits for its lane's cancel DONEs (they carry the work
# the lane did; a live lane answers within a step). A dead or hung lane must not hold the record.
CANCEL_DONE_WAIT_S = 2.0


def _ms(ns: int) -> float:
    return round(ns / 1e6, 3)


class RequestTracker:
    def __init__(self, state, route: str, request_id: str, session_id: str | None = None) -> None:
        self._state = state
        self._start_ns = time.perf_counter_ns()
        self._admitted_ns: int | None = None
        self._finished = False
        self.record = RequestRecord(request_id=request_id, route=route, session_id=session_id)
        self._prefill_ns = 0
        self._decode_ns = 0
        self._prompt_tokens_by_prompt: dict[int, int] = {}
        self._cached_tokens_by_prompt: dict[int, int] = {}
        self._prefill_ns_by_prompt: dict[int, int] = {}  # the slowest choice's: its prompt ran once
        self._adapter_label = ""  # LoRA adapters' names, as the request started (they may be unloaded by its end)
        self._counted = False  # any lane work counted (finished choices, or a cancel's DONEs)
        self._written = False
        self._generation = None  # gateway.serve.generation.Generation: its cancelled streams (lane_cancelled)
        self._n_per_prompt = 1

    @contextlib.contextmanager
    def recorded(self):
        """Around a handler's work: whatever ends it is recorded once — an APIError with its status
        and outcome, a client disconnect (CancelledError) as 499, anything else as a 500. An
        outcome recorded inside (success, a stream's in-band error, a write stall) stands."""
        try:
            yield
        except APIError as exc:
            self.finish(outcome_for(exc.status, exc.code), exc.status, exc.code)
            raise
        except Exception:
            self.finish("error", 500, "internal_error")
            raise
        except asyncio.CancelledError:
            self.finish("disconnect", 499, "client_disconnected")
            raise

    def set_model(self, model: str, stream: bool, lora: tuple = ()) -> None:
        self.record.model = model
        self.record.stream = stream
        self.record.lora = [list(pair) for pair in lora] or None
        if lora:
            self._adapter_label = self._state.lora.label(self._state.pool, model, lora)

    def admitted(self) -> None:
        self._admitted_ns = time.perf_counter_ns()
        self.record.admission_ms = _ms(self._admitted_ns - self._start_ns)
        if self._state.metrics and self.record.model:
            self._state.metrics.admission.labels(self.record.model).observe(self.record.admission_ms / 1e3)

    def first_token(self, at_ns: int | None = None) -> None:
        """The first content reached the client: now (queued path), or at a CLOCK_MONOTONIC
        time the native relay recorded (direct path; perf_counter_ns is that clock on Linux).
        The earliest of the reported times wins."""
        ttft_ms = _ms((time.perf_counter_ns() if at_ns is None else at_ns) - self._start_ns)
        if self.record.ttft_ms is None or ttft_ms < self.record.ttft_ms:
            self.record.ttft_ms = ttft_ms

    def socket_full(self, num_writes: int) -> None:
        if num_writes and self._state.metrics:
            self._state.metrics.socket_full.labels(self._state.model_label(self.record.model)).inc(num_writes)

    def watch(self, generation, n_per_prompt: int) -> None:
        """The request's Generation: what its cancelled streams' lanes did is counted at finish()."""
        self._generation, self._n_per_prompt = generation, n_per_prompt

    def choice_done(self, prompt_index: int, done) -> None:
        """`done` is a lane ChoiceDone; the prompt of a submission is counted once, not per choice."""
        self._count(prompt_index, done)
        self.record.n_choices += 1
        self.record.finish_reason = done.finish_reason

    def _count(self, prompt_index: int, done) -> None:
        self._counted = True
        # max: a choice cancelled mid-prompt reports only the positions it fed
        self._prompt_tokens_by_prompt[prompt_index] = max(done.prompt_tokens,
                                                          self._prompt_tokens_by_prompt.get(prompt_index, 0))
        # n > 1 choices copy the first one's prompt K/V: the prompt counts as computed once.
        self._cached_tokens_by_prompt[prompt_index] = min(
            done.cached_tokens, self._cached_tokens_by_prompt.get(prompt_index, done.cached_tokens))
        self.record.cached_tokens = sum(self._cached_tokens_by_prompt.values())
        if (not self.record.stream and self.record.ttft_ms is None and self._admitted_ns is not None
                and done.completion_tokens):
            # non-stream: the first token existed once the lane finished the prompt
            self.record.ttft_ms = _ms(self._admitted_ns + done.prefill_ns - self._start_ns)
        self.record.completion_tokens += done.completion_tokens
        self.record.prompt_tokens = sum(self._prompt_tokens_by_prompt.values())
        self._prefill_ns += done.prefill_ns
        self._decode_ns += done.decode_ns
        self._prefill_ns_by_prompt[prompt_index] = max(done.prefill_ns, self._prefill_ns_by_prompt.get(prompt_index, 0))

    def timing_ns(self) -> tuple[int, int | None, int, int]:
        """(arrival, admission or None, prompt processing summed over prompts, decode summed over
        choices) in perf_counter ns — the inputs of gateway.serve.stats."""
        return self._start_ns, self._admitted_ns, sum(self._prefill_ns_by_prompt.values()), self._decode_ns

    def finish(self, outcome: str, status: int, error_code: str | None = None) -> None:
        """The outcome as the client saw it. Written at once, or — when streams were cancelled on
        their lanes (disconnect, DELETE, Stop) — once their cancel DONEs arrive with the work done
        so far, or after CANCEL_DONE_WAIT_S (a lane that died or hangs); never blocks the loop."""
        if self._finished:
            return
        self._finished = True
        end_ns = time.perf_counter_ns()
        rec = self.record
        rec.outcome, rec.status, rec.error_code = outcome, status, error_code
        rec.total_ms = _ms(end_ns - self._start_ns)
        if self._admitted_ns is not None:
            rec.model_ms = _ms(end_ns - self._admitted_ns)
        cancelled = self._generation.cancelled_streams if self._generation is not None else []
        pending = [stream for _, stream in cancelled if not stream.finished]
        if pending:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:
                self._write_when_ended(loop, pending)
                return
        self._write()

    def _write_when_ended(self, loop, pending: list) -> None:
        left = [len(pending)]
        timer = loop.call_later(CANCEL_DONE_WAIT_S, self._write)

        def one_ended() -> None:
            left[0] -= 1
            if not left[0]:
                timer.cancel()
                self._write()

        for stream in pending:
            stream.when_ended(one_ended)

    def _account_cancelled(self) -> None:
        """The cancel DONEs (and unread ChoiceDones) of streams cut short: tokens, times, TTFT."""
        for offset, stream in self._generation.cancelled_streams if self._generation is not None else []:
            for done in stream.unaccounted_dones():
                if done.prompt_tokens or done.completion_tokens:  # a choice still queued did nothing
                    self._count((offset + done.choice) // self._n_per_prompt, done)
            if self.record.stream and stream.first_direct_ns:
                self.first_token(stream.first_direct_ns)  # the relay sent deltas before the cut

    def _write(self) -> None:
        if self._written:
            return
        self._written = True
        self._account_cancelled()
        rec, outcome, status, error_code = self.record, self.record.outcome, self.record.status, self.record.error_code
        if self._counted:
            rec.prefill_ms, rec.decode_ms = _ms(self._prefill_ns), _ms(self._decode_ns)
        state = self._state
        metrics = state.metrics
        model_label, adapter = state.model_label(rec.model), self._adapter_label
        if metrics:
            metrics.requests.labels(route=rec.route, model=model_label, adapter=adapter, outcome=outcome).inc()
            if outcome == "saturated" or status in (503, 429):
                metrics.rejected.labels(model_label, error_code or str(status)).inc()
            if self._counted:
                metrics.prompt_tokens.labels(model_label, adapter).inc(rec.prompt_tokens)
                metrics.cached_tokens.labels(model_label, adapter).inc(rec.cached_tokens)
                metrics.completion_tokens.labels(model_label, adapter).inc(rec.completion_tokens)
                metrics.prefill.labels(model_label).observe(self._prefill_ns / 1e9)
                metrics.decode.labels(model_label).observe(self._decode_ns / 1e9)
            if rec.model_ms is not None:
                metrics.inference.labels(model_label).observe(rec.model_ms / 1e3)
            if rec.ttft_ms is not None:
                metrics.ttft.labels(model_label).observe(rec.ttft_ms / 1e3)
        if state.records is not None:
            state.records.write(rec)
        state.log.info(
            "request_finished", request_id=rec.request_id, session_id=rec.session_id, route=rec.route, model=model_label,
            stream=rec.stream, outcome=outcome, status=status, error_code=error_code,
            finish_reason=rec.finish_reason, prompt_tokens=rec.prompt_tokens,
            completion_tokens=rec.completion_tokens, ttft_ms=rec.ttft_ms, total_ms=rec.total_ms,
        )
