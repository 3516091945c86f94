"""An admitted Generation to its end: streamed through a ResponseStream, or collected into one body.

Lane deltas framed natively go ring → socket without Python (gateway.serve.response); what
reaches this loop is each choice's end, items Python frames itself, and deltas that came the
queued way while the socket was busy. A lane failure after the stream started ends it with the
protocol's in-band error; before anything was sent, it is the APIError the caller answers with.
"""
from __future__ import annotations

from gateway.serve.control import outcome_for
from gateway.serve.generation import Generation, GenerationFailed
from gateway.serve.lanes import ChoiceDone, LaneError
from gateway.serve.output import Output, drained_error
from gateway.serve.response import ResponseStream, ending_stream


async def relay_stream(request, response: ResponseStream, generation: Generation, out: Output, tracker, *,
                       opening_sent: bool = False) -> None:
    """The stream's body after its status line (sent by ResponseStream.open, with the first
    submission's opening when `opening_sent`); records the outcome."""
    choices_left = generation.num_choices
    with ending_stream(request, response, tracker):
        try:
            async for offset, stream in generation.segments():
                out.segment(offset, stream)
                # 1. what precedes the deltas (chat role chunks) goes out while the lane prefills
                opening = b"" if offset == 0 and opening_sent else out.opening(offset, stream.num_choices)
                if opening:
                    await response.send(opening)
                # 2. from here the pump may write the lane's deltas to the socket itself
                response.attach(stream)
                try:
                    async for item in stream:
                        choice = offset + item.choice
                        if type(item) is ChoiceDone:
                            # 3. a choice ended: its final frames, counted once per prompt
                            tracker.first_token(stream.first_direct_ns or None)
                            if item.finish_reason == "cancelled":  # the lane was stopped by a drain
                                error = drained_error(out.retry_after_s)
                                await response.send(out.error_frames(error))
                                tracker.finish("error", 200, error.code)
                                return
                            tracker.choice_done(choice // out.n_per_prompt, item)
                            choices_left -= 1
                            data = out.choice_done(choice, item, tracker, last=not choices_left)
                        else:
                            # 4. anything Python frames, or deltas that came the queued way
                            data = out.chunk(choice, item)
                            if data:
                                tracker.first_token()
                        if data:
                            await response.send(data)
                finally:
                    response.detach()
        except (GenerationFailed, LaneError) as exc:
            failure = Generation.failed(exc)
            error = out.failure(failure.code, failure.message)
            await response.send(out.error_frames(error))
            tracker.finish(outcome_for(200, error.code), 200, error.code)
            return
        # 5. the protocol's end of stream
        tail = out.end(tracker)
        if tail:
            await response.send(tail)
        await response.eof()
        tracker.finish("success", 200)


async def collect(generation: Generation, out: Output, tracker) -> tuple[bytes, str]:
    """A non-stream request to its end: (body, content type), or the APIError to answer with."""
    try:
        async for offset, stream in generation.segments():
            async for item in stream:
                choice = offset + item.choice
                if type(item) is ChoiceDone:
                    if item.finish_reason == "cancelled":
                        raise drained_error(out.retry_after_s)
                    tracker.choice_done(choice // out.n_per_prompt, item)
                    out.collect_done(choice, item)
                else:
                    out.collect(choice, item)
    except (GenerationFailed, LaneError) as exc:
        failure = Generation.failed(exc)
        raise out.failure(failure.code, failure.message) from None
    return out.body(tracker)
