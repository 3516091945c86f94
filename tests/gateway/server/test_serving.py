"""gateway.server.lifecycle helpers that need no lanes."""
import gc

from gateway.server.lifecycle import freeze_startup_heap


def test_startup_heap_is_moved_out_of_the_collectors_reach():
    long_lived = [[i] for i in range(10000)]  # like a server's start-up heap
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() >= len(long_lived)
        assert gc.isenabled()  # per-request garbage is still collected
    finally:
        gc.unfreeze()


def test_startup_summary_names_url_web_ui_models_lanes_threads_kv_memory_and_load_time():
    from gateway.server.config import GatewayConfig
    from gateway.server.lifecycle import startup_summary
    from gateway.server.state import ServedModel, ServerState

    config = GatewayConfig(replicas=2, threads=1)
    state = ServerState(config=config)
    state.models["smollm2"] = ServedModel(name="smollm2", path="x.gguf", text=None, n_ctx=2048, n_vocab=10,
                                          created_s=0, num_slots=4, kv_cache_bytes=3 * 2**20)
    summary = startup_summary(state, "http://127.0.0.1:8000", 1.234)
    assert summary == {"url": "http://127.0.0.1:8000", "ui": "http://127.0.0.1:8000/ui", "models": {"smollm2": "2 lane(s) x 4 slots, ctx 2048/slot"},
                       "lanes": 2, "threads_per_lane": 1, "kv_cache_mib": 6.0, "load_s": 1.23}
