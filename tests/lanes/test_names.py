"""Names carry creator pid + run id; stale names are swept; /dev/shm space is checked."""
import os

import posix_ipc
import pytest

from lanes.names import ShmSpaceError, check_free_space, list_names, make_name, new_run_id, sweep_stale


def test_names_carry_pid_and_run_id():
    run = new_run_id()
    name = make_name(run, "m0r0g1", "req")
    assert name == f"/laneserve-{os.getpid()}-{run}-m0r0g1-req"


def test_sweep_removes_only_dead_creators_names():
    dead_pid = 2**22 + 12345  # above the default pid_max: never alive
    run = new_run_id()
    stale_shm = f"/laneserve-{dead_pid}-{run}-x-out"
    stale_sem = f"/laneserve-{dead_pid}-{run}-x-wake"
    live_shm = make_name(run, "x", "out")
    for n in (stale_shm, live_shm):
        posix_ipc.SharedMemory(n, posix_ipc.O_CREX, size=4096).close_fd()
    posix_ipc.Semaphore(stale_sem, posix_ipc.O_CREX).close()
    try:
        removed = sweep_stale()
        assert set(removed) >= {stale_shm[1:], "sem." + stale_sem[1:]}
        assert list_names(pid=dead_pid) == []
        assert list_names(pid=os.getpid(), run_id=run) == [live_shm[1:]]
    finally:
        posix_ipc.unlink_shared_memory(live_shm)


def test_free_space_check_has_a_clear_message():
    check_free_space(1)
    with pytest.raises(ShmSpaceError, match=r"/dev/shm has .* MiB free but the lane rings need .*shm-size"):
        check_free_space(2**60)
