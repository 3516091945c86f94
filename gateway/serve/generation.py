"""One HTTP request's generation work on a model's lanes.

A request is one or more *submissions* (one per prompt of a completions prompt array); each
submission runs its n choices as n sequences on one lane replica (batched with everything else
there). Every submission goes through the model's admission queue: the first one decides the
answer before anything is sent (queue full or wait timed out → the caller answers 429); later
ones, once the response has started, wait in the same queue and fail the stream if they time out.
`abort()` (gateway.serve.control's callback) cancels it from outside the handler, queued or running.
"""
from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass
from typing import AsyncIterator

from gateway.serve.admission import AdmissionAborted, AdmissionQueue, QueueFull, QueueTimeout
from gateway.serve.lanes import ChoiceDone, Chunk, GenerationParams
from gateway.serve.control import CANCELLED_CODE

_submission_ids = itertools.count(1)


class GenerationFailed(Exception):
    """A lane died or hung mid-request (LaneError), or no slot freed up for a later prompt."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class GenerationCancelled(GenerationFailed):
    """Cancelled through gateway.serve.control (POST /stop, DELETE /v1/requests/{id})."""

    def __init__(self) -> None:
        super().__init__(CANCELLED_CODE, "the request was cancelled")


def next_submission_id() -> int:
    return next(_submission_ids)


@dataclass(frozen=True)
class Submission:
    prompt_ids: list[int]
    params: GenerationParams
    num_choices: int
    framings: list  # lanes Framing / RepeatedFraming per (local choice, channel); [] = collect
    first_choice: int  # global choice index of this submission's local choice 0
    keep_text: bool = False  # streamed, and the text is needed at the end too (Ollama generate's context)

    def submit(self, pool, model: str):
        """Start it on a lane (lanes.pool raises LaneBusy when every slot is taken)."""
        return pool.submit(model, self.prompt_ids, self.params, next_submission_id(), num_choices=self.num_choices,
                           framings=self.framings, collect=not self.framings, keep_text=self.keep_text)


@dataclass(frozen=True)
class EmbeddingSubmission(Submission):
    """A group of embedding inputs, one prefill-only sequence each (gateway.embeddings)."""
    inputs: list = ()

    def submit(self, pool, model: str):
        return pool.submit_embeddings(model, self.inputs, next_submission_id())


@dataclass(frozen=True)
class AudioSubmission(Submission):
    """A transcription job whose samples are already in shared memory (gateway.audio)."""
    job: object = None  # lanes.audio.records.AudioJob

    def submit(self, pool, model: str):
        return pool.submit_audio(model, self.job, framings=self.framings, collect=not self.framings,
                                 keep_text=self.keep_text)


class Generation:
    def __init__(self, pool, admission: AdmissionQueue, model: str, submissions: list[Submission]) -> None:
        self._pool = pool
        self._admission = admission
        self._model = model
        self._submissions = submissions
        self._stream = None
        self.admitted_ns: int | None = None
        self.cancelled = False  # abort() cut it short: segments()/start() raise GenerationCancelled
        self._abort: asyncio.Future | None = None  # completes on abort(): a queued wait ends at once
        self._position = 0  # index of the submission being admitted or relayed
        self._over = False  # every segment was relayed
        # (global index of its choice 0, stream) of each stream cancelled on its lane: the lane's
        # cancel DONEs say what it did (gateway.server.tracking accounts them)
        self.cancelled_streams: list[tuple[int, object]] = []

    @property
    def num_choices(self) -> int:
        return sum(s.num_choices for s in self._submissions)

    async def start(self) -> None:
        """Admit the first submission (queued while every slot is taken); raises QueueFull or
        QueueTimeout (→ 429), GenerationCancelled (abort() while queued) and CancelledError
        when the client leaves while queued."""
        self._abort = asyncio.get_running_loop().create_future()
        self._stream = await self._admit(self._submissions[0])
        self.admitted_ns = time.perf_counter_ns()

    async def _admit(self, s: Submission):
        if self.cancelled:
            raise GenerationCancelled()
        try:
            return await self._admission.admit(self._model, lambda: s.submit(self._pool, self._model), self._abort)
        except AdmissionAborted:
            raise GenerationCancelled() from None

    async def segments(self) -> AsyncIterator[tuple[int, AsyncIterator[Chunk | ChoiceDone]]]:
        """(global index of the segment's choice 0, the lane's stream) per submission, in order.
        The caller iterates each stream itself — no wrapper per token on the hot path — and
        turns a LaneError into GenerationFailed with `failed()`."""
        for position, submission in enumerate(self._submissions):
            self._position = position
            if position > 0:
                try:
                    self._stream = await self._admit(submission)
                except (QueueFull, QueueTimeout):
                    raise GenerationFailed("server_busy", "no sequence slot became free for the next prompt") from None
            yield submission.first_choice, self._stream
            if self.cancelled:
                raise GenerationCancelled()  # its stream was cut short, or later prompts are dropped
            self._stream = None
        self._over = True

    @staticmethod
    def failed(exc: Exception) -> GenerationFailed:
        if isinstance(exc, GenerationFailed):
            return exc
        return GenerationFailed(getattr(exc, "code", None) or "lane_error",
                                getattr(exc, "message", None) or "the lane failed")

    def abort(self) -> bool:
        """Cancel from outside the handler (gateway.serve.control). A queued submission leaves the
        queue at once; a running one is cancelled on its lane (the slot frees at the lane's next
        step) and its stream ends now. False when nothing is left to cancel: the lane already
        finished the last submission, so the answer completes normally."""
        if self.cancelled:
            return True
        stream = self._stream
        last = self._position == len(self._submissions) - 1
        if self._over or (last and stream is not None and stream.finished):
            return False
        self.cancelled = True
        if self._abort is not None and not self._abort.done():
            self._abort.set_result(None)
        if stream is not None and not stream.finished:
            self._cancel_stream(stream)  # a finished stream of an earlier prompt is relayed to its end first
        return True

    def cancel(self) -> None:
        if self._stream is not None:
            self._cancel_stream(self._stream)
            self._stream = None

    def _cancel_stream(self, stream) -> None:
        if not getattr(stream, "cancelled", True):  # test doubles without it: nothing to account
            self.cancelled_streams.append((self._submissions[self._position].first_choice, stream))
        stream.cancel()
