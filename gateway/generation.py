"""One HTTP request's generation work on a model's lanes.

A request is one or more *submissions* (one per prompt of a completions prompt array); each
submission runs its n choices as n sequences on one lane replica (batched with everything else
there). Every submission goes through the model's admission queue: the first one decides the
answer before anything is sent (queue full or wait timed out → the caller answers 429); later
ones, once the response has started, wait in the same queue and fail the stream if they time out.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import AsyncIterator

from gateway.admission import AdmissionQueue, QueueFull, QueueTimeout
from gateway.backend import ChoiceDone, Chunk, GenerationParams

_submission_ids = itertools.count(1)


class GenerationFailed(Exception):
    """A lane died or hung mid-request (LaneError), or no slot freed up for a later prompt."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def next_submission_id() -> int:
    return next(_submission_ids)


@dataclass(frozen=True)
class Submission:
    prompt_ids: list[int]
    params: GenerationParams
    num_choices: int
    framings: list[tuple[int, int, bytes, bytes]]  # (local choice, channel, prefix, suffix); [] = collect
    first_choice: int  # global choice index of this submission's local choice 0
    keep_text: bool = False  # streamed, and the text is needed at the end too (Ollama generate's context)


class Generation:
    def __init__(self, pool, admission: AdmissionQueue, model: str, submissions: list[Submission]) -> None:
        self._pool = pool
        self._admission = admission
        self._model = model
        self._submissions = submissions
        self._stream = None
        self.admitted_ns: int | None = None

    async def start(self) -> None:
        """Admit the first submission (queued while every slot is taken); raises QueueFull or
        QueueTimeout (→ 429) and CancelledError when the client leaves while queued."""
        self._stream = await self._admission.admit(self._model, lambda: self._submit(self._submissions[0]))
        self.admitted_ns = time.perf_counter_ns()

    def _submit(self, s: Submission):
        return self._pool.submit(self._model, s.prompt_ids, s.params, next_submission_id(),
                                 num_choices=s.num_choices, framings=s.framings, collect=not s.framings,
                                 keep_text=s.keep_text)

    async def segments(self) -> AsyncIterator[tuple[int, AsyncIterator[Chunk | ChoiceDone]]]:
        """(global index of the segment's choice 0, the lane's stream) per submission, in order.
        The caller iterates each stream itself — no wrapper per token on the hot path — and
        turns a LaneError into GenerationFailed with `failed()`."""
        for position, submission in enumerate(self._submissions):
            if position > 0:
                try:
                    self._stream = await self._admission.admit(self._model, lambda s=submission: self._submit(s))
                except (QueueFull, QueueTimeout):
                    raise GenerationFailed("server_busy", "no sequence slot became free for the next prompt") from None
            yield submission.first_choice, self._stream
            self._stream = None

    @staticmethod
    def failed(exc: Exception) -> GenerationFailed:
        if isinstance(exc, GenerationFailed):
            return exc
        return GenerationFailed(getattr(exc, "code", None) or "lane_error",
                                getattr(exc, "message", None) or "the lane failed")

    def cancel(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None
