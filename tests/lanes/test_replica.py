"""Supervision with real processes: lane death and hangs mid-request, respawn with backoff,
lanes that keep failing to load, parent death, stale-name sweeping, both doorbells."""
import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import lanes

from lanes.api import ChoiceDone, Chunk, GenerationParams, LaneError, LaneModelSpec
from lanes.names import list_names, sweep_stale

from .conftest import wait_for

SSE = [(0, 0, b"data: ", b"\n\n")]


def _own_names(pool):
    return list_names(pid=os.getpid(), run_id=pool.run_id)


async def test_sigkill_mid_generation_errors_fast_respawns_and_leaks_nothing(make_pool):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=5000")], backoff_initial_s=0.05)
    pool.start()
    pool.attach(asyncio.get_running_loop())
    old_pid = pool.statuses()[0].pid
    old_names = _own_names(pool)
    stream = pool.submit("syn", [1], GenerationParams(max_tokens=100_000), 1, framings=SSE)
    assert isinstance(await stream.__anext__(), Chunk)
    os.kill(old_pid, signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(LaneError) as e:
        async for _ in stream:
            pass
    assert time.monotonic() - t0 < 1.0
    assert e.value.code == "lane_died" and "SIGKILL" in e.value.message
    await wait_for(lambda: pool.statuses()[0].state == "ready", 10, "respawned lane")
    st = pool.statuses()[0]
    assert st.pid != old_pid and st.restarts == 1
    new_names = _own_names(pool)
    assert set(new_names).isdisjoint(old_names) and len(new_names) == len(old_names)
    items = [c async for c in pool.submit("syn", [1], GenerationParams(max_tokens=3), 2, framings=SSE)]
    assert isinstance(items[0], Chunk) and items[-1] == ChoiceDone(0, "length", 1, 3, items[-1].prefill_ns,
                                                                    items[-1].decode_ns)


async def test_lane_counters_carry_over_a_respawn(make_pool):
    # lanes.lane_stats: Prometheus counters (laneserve_step_seconds, laneserve_prompt_cache_*) are
    # read from pool.lane_stats(), which must not go back to zero when a lane process is replaced.
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=1000")], backoff_initial_s=0.05)
    pool.start()
    pool.attach(asyncio.get_running_loop())

    def steps():
        return sum(st.num_steps for _, st in pool.lane_stats())

    [_ async for _ in pool.submit("syn", [1], GenerationParams(max_tokens=6), 1, framings=SSE)]
    await wait_for(lambda: steps() >= 6, 10, "STATS of the first process")
    before = steps()
    os.kill(pool.statuses()[0].pid, signal.SIGKILL)
    await wait_for(lambda: pool.statuses()[0].state == "ready" and pool.statuses()[0].restarts == 1, 10,
                   "respawned lane")
    await wait_for(lambda: pool._replicas["syn"][0].stats is not None, 10, "first STATS of the new process")
    assert steps() == before
    [_ async for _ in pool.submit("syn", [1], GenerationParams(max_tokens=4), 2, framings=SSE)]
    await wait_for(lambda: steps() >= before + 4, 10, "STATS of the new process")


async def test_hung_lane_is_detected_by_heartbeat_and_replaced(make_pool):
    # Each step publishes a quiet window of prefill_budget_ns_per_token × max_batch_tokens (a step
    # may carry a prefill chunk): 20 ms × 8 here, so a lane stopped mid-step is due at ~0.66 s.
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=1000", num_slots=1, max_batch_tokens=8)],
                     heartbeat_timeout_s=0.5, backoff_initial_s=0.05)
    pool.start()
    pool.attach(asyncio.get_running_loop())
    pid = pool.statuses()[0].pid
    stream = pool.submit("syn", [1], GenerationParams(max_tokens=100_000), 1, framings=SSE)
    await stream.__anext__()
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    with pytest.raises(LaneError) as e:
        async for _ in stream:
            pass
    assert e.value.code == "lane_hung"
    assert "stopped answering for 0.5 s and was replaced" in e.value.message  # not "killed by SIGKILL"
    assert time.monotonic() - t0 < 0.5 + 0.16 + 0.5
    await wait_for(lambda: pool.statuses()[0].state == "ready", 10, "replacement lane")
    assert pool.statuses()[0].pid != pid


async def test_lane_hung_inside_a_decode_step_is_detected_within_the_heartbeat_timeout(make_pool):
    step_s = 0.2  # the lane spends nearly all its time inside steps
    pool = make_pool([LaneModelSpec("syn", f"synthetic:step_us={int(step_s * 1e6)}")], heartbeat_timeout_s=0.5,
                     backoff_initial_s=0.05)
    pool.start()
    pool.attach(asyncio.get_running_loop())
    pid = pool.statuses()[0].pid
    stream = pool.submit("syn", [1], GenerationParams(max_tokens=100_000), 1, framings=SSE)
    await stream.__anext__()  # a step just ended: the lane is inside the next one
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    with pytest.raises(LaneError) as e:
        async for _ in stream:
            pass
    assert e.value.code == "lane_hung"
    assert time.monotonic() - t0 < 0.5 + step_s + 1.0


async def test_long_prefill_is_not_mistaken_for_a_hang(make_pool):
    # 200 prompt tokens × 5 ms = 1 s of prefill, longer than the 0.4 s heartbeat timeout.
    pool = make_pool([LaneModelSpec("syn", "synthetic:prefill_us_per_token=5000")], heartbeat_timeout_s=0.4)
    pool.start()
    pool.attach(asyncio.get_running_loop())
    items = [i async for i in pool.submit("syn", list(range(200)), GenerationParams(max_tokens=2), 1, framings=SSE)]
    assert items[-1].finish_reason == "length"
    assert pool.statuses()[0].restarts == 0


async def test_lane_that_keeps_failing_to_load_stays_down(make_pool, tmp_path):
    flag = tmp_path / "break"
    pool = make_pool([LaneModelSpec("syn", f"synthetic:fail_if_exists={flag}")], backoff_initial_s=0.05,
                     max_load_failures=3)
    pool.start()
    pool.attach(asyncio.get_running_loop())
    flag.write_text("x")
    os.kill(pool.statuses()[0].pid, signal.SIGKILL)
    await wait_for(lambda: pool.statuses()[0].state == "failed", 10, "lane marked failed")
    st = pool.statuses()[0]
    assert st.restarts == 3 and st.pid is None
    await asyncio.sleep(0.5)
    assert pool.statuses()[0].restarts == 3  # no spawn storm
    assert _own_names(pool) == []


@pytest.mark.parametrize("doorbell", ["eventfd", "semaphore"])
async def test_both_doorbells_deliver(make_pool, doorbell):
    pool = make_pool([LaneModelSpec("syn", "synthetic:step_us=200")], doorbell=doorbell)
    pool.start()
    pool.attach(asyncio.get_running_loop())
    for rid in range(1, 4):
        items = [i async for i in pool.submit("syn", [1], GenerationParams(max_tokens=50), rid, framings=SSE)]
        assert items[-1].completion_tokens == 50


PARENT = textwrap.dedent("""
    import asyncio, sys, time
    from lanes.pool import LanePool, LaneModelSpec
    pool = LanePool([LaneModelSpec("syn", "synthetic:", replicas=2)])
    pool.start()
    print(pool.run_id, *[s.pid for s in pool.statuses()], flush=True)
    time.sleep(60)
""")


def test_lanes_die_with_their_parent_and_names_are_swept_later():
    # Where the lanes package under test lives (installed or in-place build), not the checkout.
    root = os.path.dirname(os.path.dirname(os.path.abspath(lanes.__file__)))
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": root})
    try:
        run_id, *pids = parent.stdout.readline().split()
        pids = [int(p) for p in pids]
        assert len(pids) == 2
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 2.0
        while any(_alive(p) for p in pids):
            assert time.monotonic() < deadline, "lanes outlived their parent by 2 s"
            time.sleep(0.01)
    finally:
        parent.kill()
        parent.wait()
    assert list_names(pid=parent.pid, run_id=run_id)  # a SIGKILLed creator leaks its names...
    swept = sweep_stale()
    assert list_names(pid=parent.pid, run_id=run_id) == []  # ...and the next start sweeps them
    assert len([n for n in swept if run_id in n]) == 2 * 3  # req + out rings, wake semaphore


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
