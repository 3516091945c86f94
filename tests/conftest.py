"""Shared pytest configuration: a global invariant checked once the whole session has run."""
import os

import pytest


def _our_shm_names() -> list[str]:
    prefix = f"laneserve-{os.getpid()}-"
    try:
        return sorted(n for n in os.listdir("/dev/shm") if n.removeprefix("sem.").startswith(prefix))
    except FileNotFoundError:
        return []


@pytest.fixture(scope="session", autouse=True)
def no_shared_memory_left_behind():
    """Every ring segment and semaphore this test process created is unlinked by the end."""
    yield
    leftovers = _our_shm_names()
    assert not leftovers, f"/dev/shm names left behind by this run: {leftovers}"
