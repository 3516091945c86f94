"""lanes.residency over real synthetic lanes: a deferred model is not spawned at start, loads on
request, serves, unloads (its process gone, its names unlinked, no respawn) and loads again; a
failed load stops at once with the lane's message, and a later load retries."""
import asyncio
import os

import pytest

from lanes.api import GenerationParams, LaneModelSpec, LaneStartupError
from lanes.residency import load_model, resident_bytes, unload_model

from .test_pool import collect



async def test_deferred_model_loads_serves_unloads_and_loads_again(make_pool):
    pool = make_pool([LaneModelSpec("eager", "synthetic:"), LaneModelSpec("lazy", "synthetic:load_ms=50", replicas=2)],
                     deferred=("lazy",))
    pool.start()
    assert [(s.model, s.state) for s in pool.statuses()] == [("eager", "ready"), ("lazy", "stopped"),
                                                              ("lazy", "stopped")]
    pool.attach(asyncio.get_running_loop())
    assert pool.capacity("lazy") == (0, 0)
    for round_ in range(2):
        await load_model(pool, "lazy")
        lazy = [s for s in pool.statuses() if s.model == "lazy"]
        assert [s.state for s in lazy] == ["ready", "ready"]
        assert resident_bytes(pool, "lazy") > 0
        _, dones = await collect(pool.submit("lazy", [1, 2], GenerationParams(max_tokens=5), 10 + round_,
                                             collect=True))
        assert dones[0].completion_tokens == 5
        pids = [s.pid for s in lazy]
        await unload_model(pool, "lazy")
        assert [s.state for s in pool.statuses() if s.model == "lazy"] == ["stopped", "stopped"]
        assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)
        assert resident_bytes(pool, "lazy") == 0
        await asyncio.sleep(0.3)  # past the first respawn backoff: an unload is no crash
        assert [s.state for s in pool.statuses() if s.model == "lazy"] == ["stopped", "stopped"]
    assert pool.capacity("eager") == (0, 8)


async def test_failed_load_reports_the_lane_message_and_retries_only_when_asked(make_pool, tmp_path):
    marker = tmp_path / "broken"
    marker.write_text("x")
    pool = make_pool([LaneModelSpec("lazy", f"synthetic:fail_if_exists={marker}")], deferred=("lazy",))
    pool.start()
    pool.attach(asyncio.get_running_loop())
    with pytest.raises(LaneStartupError, match="exists"):
        await load_model(pool, "lazy")
    assert [s.state for s in pool.statuses()] == ["stopped"]
    await asyncio.sleep(0.4)  # no respawn of its own
    assert [s.state for s in pool.statuses()] == ["stopped"]
    marker.unlink()
    await load_model(pool, "lazy")
    assert [s.state for s in pool.statuses()] == ["ready"]
