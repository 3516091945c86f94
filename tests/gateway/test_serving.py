"""gateway.serving helpers that need no lanes."""
import gc

from gateway.serving import freeze_startup_heap


def test_startup_heap_is_moved_out_of_the_collectors_reach():
    long_lived = [[i] for i in range(10000)]  # like a server's start-up heap
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() >= len(long_lived)
        assert gc.isenabled()  # per-request garbage is still collected
    finally:
        gc.unfreeze()
