"""RequestTracker and a request cut short (unit, no server): the record waits for the lane's
cancel DONEs and counts them, but never longer than CANCEL_DONE_WAIT_S (a dead or hung lane)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from gateway.server import tracking
from gateway.server.tracking import RequestTracker
from lanes.api import ChoiceDone
from lanes.stream import RequestStream


class State:
    metrics = None
    lora = None

    def __init__(self) -> None:
        self.written = []
        self.records = SimpleNamespace(write=self.written.append)
        self.log = SimpleNamespace(info=lambda *a, **k: None)

    @staticmethod
    def model_label(model):
        return model or "unknown"


def cancelled_stream(num_choices: int = 1) -> RequestStream:
    stream = RequestStream(7, num_choices, None, lambda rid: None)
    stream.cancel()
    return stream


def done(choice: int, pt: int, ct: int) -> ChoiceDone:
    return ChoiceDone(choice, "cancelled", pt, ct, 1_000_000, 2_000_000, 0, None, None, 0, -1)


async def test_record_waits_for_the_cancel_dones_and_counts_them():
    state, stream = State(), cancelled_stream(2)
    tracker = RequestTracker(state, "chat", "r1")
    tracker.set_model("m", stream=False)
    tracker.admitted()
    tracker.watch(SimpleNamespace(cancelled_streams=[(0, stream)]), n_per_prompt=2)
    tracker.finish("disconnect", 499, "client_disconnected")
    assert state.written == []  # the lane has not answered the cancel yet
    stream.push_done(done(0, 12, 30), last=False)
    stream.push_done(done(1, 12, 25), last=True)
    (rec,) = state.written
    assert (rec.outcome, rec.status, rec.n_choices) == ("disconnect", 499, 0)
    assert (rec.prompt_tokens, rec.completion_tokens) == (12, 55)  # one prompt, two choices
    assert rec.ttft_ms is not None and rec.prefill_ms == 2.0 and rec.decode_ms == 4.0


async def test_record_is_written_after_the_deadline_when_the_lane_never_answers(monkeypatch):
    monkeypatch.setattr(tracking, "CANCEL_DONE_WAIT_S", 0.05)
    state, stream = State(), cancelled_stream()
    tracker = RequestTracker(state, "chat", "r2")
    tracker.watch(SimpleNamespace(cancelled_streams=[(0, stream)]), n_per_prompt=1)
    tracker.finish("cancelled", 200, "request_cancelled")
    await asyncio.sleep(0.2)
    (rec,) = state.written
    assert (rec.outcome, rec.prompt_tokens, rec.completion_tokens, rec.ttft_ms) == ("cancelled", 0, 0, None)
    stream.push_done(done(0, 5, 5), last=True)  # too late: written once
    assert len(state.written) == 1
