"""Lane STATS records (lanes.wire.Stats) as the gateway reports them: per replica across restarts,
and per model over its replicas.

A lane's counters are cumulative over its process, so a respawned lane starts again from zero;
a replica keeps the counters of its ended processes (`retire`) and reports them added to the
current one's (`carry`), so that Prometheus counters never go backwards. Gauges (sequences and
the prompt cache's bytes, budget and entries now) belong to the running process only: an ended
process contributes none."""
from __future__ import annotations

import dataclasses

from lanes.wire import Stats

GAUGE_FIELDS = frozenset({"active_sequences", "waiting_sequences", "prompt_cache_bytes",
                          "prompt_cache_budget_bytes", "prompt_cache_entries", "kv_pages_free", "kv_pages_total",
                          "kv_window_pages_free", "kv_window_pages_total",
                          "prompt_cache_disk_bytes", "prompt_cache_disk_budget_bytes"})
_FIELDS = tuple(f.name for f in dataclasses.fields(Stats))


def _add(a, b):
    return tuple(x + y for x, y in zip(a, b)) if isinstance(a, tuple) else a + b


def _zero(value):
    return tuple(0 for _ in value) if isinstance(value, tuple) else 0


def retire(retired: Stats | None, ended: Stats | None) -> Stats | None:
    """The counters of a replica's ended processes, `ended` (its last STATS) added; gauges 0."""
    if ended is None:
        return retired
    gone = Stats(**{f: _zero(getattr(ended, f)) if f in GAUGE_FIELDS else getattr(ended, f) for f in _FIELDS})
    return gone if retired is None else total((retired, gone))


def carry(retired: Stats | None, current: Stats | None) -> Stats | None:
    """What a replica reports: the counters of its ended processes plus the current one's."""
    if retired is None or current is None:
        return current if retired is None else retired
    return total((retired, current))


def total(stats) -> Stats:
    """Every field summed (bucket counts per bucket): a model's figures over its replicas."""
    stats = list(stats)
    out = {f: getattr(stats[0], f) for f in _FIELDS}
    for st in stats[1:]:
        out = {f: _add(out[f], getattr(st, f)) for f in _FIELDS}
    return Stats(**out)


def per_model(lane_stats) -> dict[str, Stats]:
    """(model, Stats) pairs (lanes.pool.LanePool.lane_stats) → model → its replicas' total."""
    by_model: dict[str, list[Stats]] = {}
    for model, st in lane_stats:
        by_model.setdefault(model, []).append(st)
    return {model: total(group) for model, group in by_model.items()}
