"""lanes/slot_files.py without a lane: which SlotFileError kind each refusal is (the route maps
bad_request → 400, unavailable → 503 + Retry-After, failed → 500)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from lanes import slot_files


def _pool(channels):
    replica = SimpleNamespace(spec=SimpleNamespace(num_slots=2), channels=channels)
    return SimpleNamespace(replicas_of=lambda model: [replica, replica])


def test_a_slot_out_of_range_is_a_bad_request():
    with pytest.raises(slot_files.SlotFileError) as err:
        asyncio.run(slot_files.run(_pool(object()), "m", "save", 4, "a.bin"))
    assert err.value.kind == "bad_request" and "has 4" in str(err.value)


def test_a_lane_that_is_down_is_unavailable():
    with pytest.raises(slot_files.SlotFileError) as err:
        asyncio.run(slot_files.run(_pool(None), "m", "save", 3, "a.bin"))
    assert err.value.kind == "unavailable" and "slot 3" in str(err.value)
