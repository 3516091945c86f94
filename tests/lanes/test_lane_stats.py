"""lanes.lane_stats: a replica's counters carry over its restarts (never backwards), its gauges are
the running process's only, and a model's figures sum over its replicas."""
import dataclasses

from lanes import lane_stats, wire


def _stats(steps, hit_tokens, cache_bytes, entries, active=0) -> wire.Stats:
    buckets = tuple([steps] + [0] * (wire.STEP_BUCKETS - 1))
    return wire.Stats(steps, 1000 * steps, 2 * steps, buckets, buckets, active, 0,
                      prompt_cache_bytes=cache_bytes, prompt_cache_budget_bytes=1 << 30,
                      prompt_cache_hits=hit_tokens // 100, prompt_cache_hit_tokens=hit_tokens,
                      prompt_cache_stores=3, prompt_cache_evictions=1, prompt_cache_entries=entries)


def test_every_stats_field_is_a_counter_or_a_named_gauge():
    names = {f.name for f in dataclasses.fields(wire.Stats)}
    assert lane_stats.GAUGE_FIELDS < names
    # every STATS record field but padding is in lanes.wire.Stats
    assert names == set(wire.STATS_RECORD.names) - {"prompt_cache_reserved"}


def test_a_restarted_replica_keeps_its_counters_and_drops_its_gauges():
    first = _stats(10, 500, 4 << 20, 2, active=1)
    retired = lane_stats.retire(None, first)
    assert retired.num_steps == 10 and retired.prompt_cache_hit_tokens == 500 and retired.prompt_cache_evictions == 1
    assert (retired.prompt_cache_bytes, retired.prompt_cache_budget_bytes, retired.prompt_cache_entries,
            retired.active_sequences) == (0, 0, 0, 0)
    assert lane_stats.carry(retired, None) == retired  # respawning: not reported yet
    second = _stats(4, 200, 1 << 20, 1)
    now = lane_stats.carry(retired, second)
    assert (now.num_steps, now.prompt_cache_hit_tokens, now.prompt_cache_hits) == (14, 700, 7)
    assert now.prompt_cache_stores == 6
    assert now.step_ns_buckets[0] == 14
    assert (now.prompt_cache_bytes, now.prompt_cache_budget_bytes, now.prompt_cache_entries) == (1 << 20, 1 << 30, 1)
    twice = lane_stats.retire(retired, second)
    assert twice.num_steps == 14 and twice.prompt_cache_bytes == 0
    assert lane_stats.retire(twice, None) == twice
    assert lane_stats.carry(None, second) == second and lane_stats.carry(None, None) is None


def test_per_model_sums_replicas():
    got = lane_stats.per_model([("a", _stats(1, 100, 1 << 20, 1)), ("b", _stats(5, 0, 0, 0)),
                                ("a", _stats(2, 300, 2 << 20, 2))])
    assert set(got) == {"a", "b"}
    a = got["a"]
    assert (a.num_steps, a.prompt_cache_hit_tokens) == (3, 400)
    assert (a.prompt_cache_bytes, a.prompt_cache_entries) == (3 << 20, 3)
    assert a.prompt_cache_budget_bytes == 2 << 30 and a.step_ns_buckets[0] == 3
    assert got["b"] == _stats(5, 0, 0, 0)
