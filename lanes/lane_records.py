"""What each record a lane sends does to its replica (lanes.replica.LaneReplica.dispatch): one
handler per record type. DELTA text goes straight from the output ring to the sockets through the
native pump; these are the records the pump hands to Python. All run on the pool's event loop."""
from __future__ import annotations

import logging
import time

from lanes import slot_files, wire
from lanes.api import ChoiceDone, Embedding, LaneError, ScoredChunk
from lanes.audio.records import transcript_part

log = logging.getLogger("laneserve.lanes")


def _done(replica, payload: bytes) -> None:
    rid, choice, reason, pt, ct, cached, flags, pre, dec, stop_string, _ = wire.decode_done(payload)
    stream = replica.streams.get(rid)
    if stream is None:
        return
    reader = replica.channels.reader
    text = reader.take_text(rid, choice)
    reasoning = reader.take_text(rid, choice, wire.CHANNELS["reasoning"])
    _, first_ns, next_number = reader.route_stats(rid)
    if first_ns and not stream.first_direct_ns:
        stream.first_direct_ns = first_ns
    last = bool(flags & wire.DONE_LAST_CHOICE)
    stream.push_done(ChoiceDone(choice, wire.FINISH_NAMES.get(reason, "stop"), pt, ct, pre, dec, cached, text,
                                reasoning, next_number, stop_string - 1),
                     last)
    if last:
        replica.request_over(rid)


def _logprobs(replica, payload: bytes) -> None:
    rid, choice, positions, num_prompt, content, reasoning = wire.decode_logprobs(payload)
    stream = replica.streams.get(rid)
    if stream is not None:
        stream.push_item(ScoredChunk(choice, positions, num_prompt, content, reasoning))


def _embedding(replica, payload: bytes) -> None:
    rid, choice, prompt_tokens, vector = wire.decode_embedding(payload)
    stream = replica.streams.get(rid)
    if stream is not None:
        stream.push_embedding(Embedding(choice, vector, prompt_tokens))


def _transcript(replica, payload: bytes) -> None:  # audio lanes: metadata of a transcription (lanes/audio/)
    rid, part = transcript_part(payload)
    stream = replica.streams.get(rid)
    if stream is not None and part is not None:
        stream.push_transcript(part)


def _stats(replica, payload: bytes) -> None:
    replica.stats = wire.decode_stats(payload)


def _adapter(replica, payload: bytes) -> None:
    replica.pool.adapter_status(replica, *wire.decode_adapter_status(payload))


def _slot_file_done(replica, payload: bytes) -> None:
    slot_files.answered(payload)


def _error(replica, payload: bytes) -> None:
    rid, code, message = wire.decode_error(payload)
    if rid == 0:
        replica.last_error = message
        log.warning("lane %s (pid %s): %s: %s", replica.name, replica.pid, code, message)
    elif rid in replica.streams:
        replica.streams[rid].fail(LaneError(code, message))
        replica.request_over(rid)


def _hello(replica, payload: bytes) -> None:
    replica.hello = wire.decode_hello(payload)
    replica.load_failures = 0  # the limit counts consecutive failed loads
    replica.state = "ready"
    replica.ready_ns = time.monotonic_ns()
    replica.pool.capacity_changed(replica.spec.name)


def _delta(replica, payload: bytes) -> None:  # only a malformed delta reaches here (the pump takes the rest)
    log.warning("lane %s sent a malformed DELTA record (%d bytes)", replica.name, len(payload))


HANDLERS = {wire.DONE: _done, wire.LOGPROBS: _logprobs, wire.EMBEDDING: _embedding, wire.TRANSCRIPT: _transcript,
            wire.STATS: _stats, wire.ADAPTER: _adapter, wire.SLOT_FILE_DONE: _slot_file_done, wire.ERROR: _error,
            wire.HELLO: _hello, wire.DELTA: _delta}
