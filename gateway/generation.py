"""One HTTP request's generation work on a model's lanes.

A request is one or more *submissions* (one per prompt of a completions prompt array); each
submission runs its n choices on one lane (the pool runs them one after another). Admission
is decided by the first submission: no idle lane → LaneBusy → the caller answers 429 before
anything is sent. Later submissions of the same request must not fail half-way through a
response, so they wait (bounded) for a lane instead.
"""
from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass
from typing import AsyncIterator

from gateway.backend import ChoiceDone, Chunk, Framing, GenerationParams, LaneBusy

_submission_ids = itertools.count(1)


class GenerationFailed(Exception):
    """A lane died or hung mid-request (LaneError), or no lane freed up for a later prompt."""

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
    framings: list[Framing]
    first_choice: int  # global choice index of this submission's local choice 0


class Generation:
    def __init__(self, pool, model: str, submissions: list[Submission], *, continuation_timeout_s: float) -> None:
        self._pool = pool
        self._model = model
        self._submissions = submissions
        self._continuation_timeout_s = continuation_timeout_s
        self._stream = None
        self.admitted_ns: int | None = None

    def start(self) -> None:
        """Admit the first submission now; raises LaneBusy when every lane of the model is busy."""
        self._stream = self._submit(self._submissions[0])
        self.admitted_ns = time.perf_counter_ns()

    def _submit(self, submission: Submission):
        return self._pool.submit(self._model, submission.prompt_ids, submission.params, submission.framings,
                                 next_submission_id())

    async def _continue(self, submission: Submission):
        deadline = time.monotonic() + self._continuation_timeout_s
        delay_s = 0.001
        while True:
            try:
                return self._submit(submission)
            except LaneBusy:
                if time.monotonic() >= deadline:
                    raise GenerationFailed("server_busy", "no lane became free for the next prompt") from None
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 0.05)

    async def segments(self) -> AsyncIterator[tuple[int, AsyncIterator[Chunk | ChoiceDone]]]:
        """(global index of the segment's choice 0, the lane's stream) per submission, in order.
        The caller iterates each stream itself — no wrapper per token on the hot path — and
        turns a LaneError into GenerationFailed with `failed()`."""
        for position, submission in enumerate(self._submissions):
            if position > 0:
                self._stream = await self._continue(submission)
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
