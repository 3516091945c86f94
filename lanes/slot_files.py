"""llama-server's slot files through the lanes (csrc/engine/slot_file.h, BatchEngine::save_slot,
restore_slot, erase_slot): a SLOT_FILE record to the lane that owns the slot, its SLOT_FILE_DONE
answer matched back by op id. A server-wide slot id is lane index × slots per lane + the lane's slot,
lanes in the pool's order for the model."""
from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

from lanes import wire

TIMEOUT_S = 120.0  # a save or restore writes or reads the slot's pages (megabytes per 64 tokens)
ACTIONS = tuple(wire.SLOT_ACTIONS)

_op_ids = itertools.count(1)
_waits: dict[int, asyncio.Future] = {}


class SlotFileError(Exception):
    """Why an action did not happen: `kind` is "bad_request" (the slot or name was wrong), "unavailable"
    (the owning lane is down or restarting, or did not answer: worth a retry) or "failed" (the lane's
    file operation failed)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class SlotFileResult:
    n_tokens: int      # positions saved, restored or erased
    n_bytes: int       # file bytes written or read
    elapsed_ms: float  # the lane's time for it


def num_slots(pool, model: str) -> int:
    """Server-wide slot ids of the model: [0, this)."""
    replicas = pool.replicas_of(model)
    return len(replicas) * replicas[0].spec.num_slots if replicas else 0


async def run(pool, model: str, action: str, slot_id: int, filename: str) -> SlotFileResult:
    """One action on server-wide slot slot_id; SlotFileError when the lane refuses or fails, or is down."""
    replicas = pool.replicas_of(model)
    if not 0 <= slot_id < num_slots(pool, model):
        raise SlotFileError(f"slot {slot_id} does not exist (this server has {num_slots(pool, model)})", "bad_request")
    replica = replicas[slot_id // replicas[0].spec.num_slots]
    if replica.channels is None:
        raise SlotFileError(f"the lane of slot {slot_id} is not running (restarting?)", "unavailable")
    op_id = next(_op_ids)
    future = asyncio.get_running_loop().create_future()
    _waits[op_id] = future
    try:
        replica.send_control(wire.SLOT_FILE, wire.encode_slot_file(op_id, action, slot_id % replica.spec.num_slots,
                                                                    filename))
        done, message = await asyncio.wait_for(future, TIMEOUT_S)
    except asyncio.TimeoutError:
        raise SlotFileError(f"the lane did not answer within {TIMEOUT_S:.0f} s", "unavailable") from None
    finally:
        _waits.pop(op_id, None)
    if not done["ok"]:
        raise SlotFileError(message, "bad_request" if done["bad_request"] else "failed")
    return SlotFileResult(done["n_tokens"], done["n_bytes"], done["elapsed_ns"] / 1e6)


def answered(payload: bytes) -> None:
    """A SLOT_FILE_DONE record from a lane (lanes.replica dispatch)."""
    op_id, done, message = wire.decode_slot_file_done(payload)
    future = _waits.get(op_id)
    if future is not None and not future.done():
        future.set_result((done, message))
