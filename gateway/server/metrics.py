"""Prometheus metrics, all prefixed `laneserve_`; labels are model/route/outcome/state and the
request counters' LoRA `adapter` ("" for the base weights) only — never request ids or text. Lane
gauges, slot use, queue depth, the lanes' batch histograms and their prompt caches are read from the
supervisor and the admission queue at scrape time, so they cannot drift from what /health/ready reports."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from gateway.serve.lanes import LANE_STATES, STEP_TIME_BOUNDS_NS, BATCH_TOKEN_BOUNDS, stats_per_model

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


def _histogram(name: str, doc: str, bounds, per_model: dict) -> HistogramMetricFamily:
    """Lane STATS buckets (non-cumulative counts, last = +Inf) summed per model → Prometheus."""
    family = HistogramMetricFamily(name, doc, labels=["model"])
    for model, (counts, total) in sorted(per_model.items()):
        cumulative, running = [], 0
        for bound, count in zip(list(bounds) + ["+Inf"], counts):
            running += count
            cumulative.append((str(bound), running))
        family.add_metric([model], cumulative, total)
    return family


class _ServingCollector:
    """Reads the supervisor (lanes, slots, lane STATS) and the admission queue on each scrape."""

    def __init__(self, state) -> None:
        self._state = state

    def collect(self):
        state = self._state
        lanes = GaugeMetricFamily("laneserve_lanes", "Lane replicas by model and state", labels=["model", "state"])
        restarts = CounterMetricFamily("laneserve_lane_restarts", "Lane respawns by model", labels=["model"])
        slots = GaugeMetricFamily("laneserve_slots", "Sequence slots of serving lanes", labels=["model"])
        in_use = GaugeMetricFamily("laneserve_slots_in_use", "Requests holding sequence slots", labels=["model"])
        queue = GaugeMetricFamily("laneserve_queue_depth", "Requests waiting for a slot", labels=["model"])
        counts: dict[tuple[str, str], int] = {}
        restart_totals: dict[str, int] = {}
        slot_totals: dict[str, list[int]] = {}
        for status in state.statuses():
            for lane_state in LANE_STATES:
                counts.setdefault((status.model, lane_state), 0)
            counts[(status.model, status.state)] += 1
            restart_totals[status.model] = restart_totals.get(status.model, 0) + status.restarts
            totals = slot_totals.setdefault(status.model, [0, 0])
            totals[1] += status.in_flight
            if status.state in ("ready", "busy"):
                totals[0] += status.num_slots
        for (model, lane_state), value in sorted(counts.items()):
            lanes.add_metric([model, lane_state], value)
        for model, value in sorted(restart_totals.items()):
            restarts.add_metric([model], value)
        for model, (total, used) in sorted(slot_totals.items()):
            slots.add_metric([model], total)
            in_use.add_metric([model], used)
        depths = state.admission.depths() if state.admission is not None else {}
        for model in sorted(slot_totals):
            queue.add_metric([model], depths.get(model, 0))
        yield from (lanes, restarts, slots, in_use, queue)

        pool = state.pool
        per_model = stats_per_model(pool.lane_stats() if pool is not None else ())
        yield _histogram("laneserve_step_seconds", "Lane step (one forward pass + sampling) time",
                         [b / 1e9 for b in STEP_TIME_BOUNDS_NS],
                         {m: (st.step_ns_buckets, st.step_ns_sum / 1e9) for m, st in per_model.items()})
        yield _histogram("laneserve_batch_tokens", "Tokens per lane step (decode tokens + prompt chunk)",
                         BATCH_TOKEN_BOUNDS,
                         {m: (st.batch_tokens_buckets, st.batch_tokens_sum) for m, st in per_model.items()})
        yield from _prompt_cache_families(per_model)


# The lanes' prompt caches (csrc/engine/prefix_tree.h: cached K/V pages), summed over a model's lanes:
# (metric name, help, lanes.wire.Stats field, gauge or counter). Counters carry over lane restarts.
PROMPT_CACHE_METRICS = (
    ("laneserve_prompt_cache_bytes", "K/V bytes of cached pages no running sequence maps", "prompt_cache_bytes", True),
    ("laneserve_prompt_cache_budget_bytes", "Byte budget of the lanes' prompt caches (0: off)",
     "prompt_cache_budget_bytes", True),
    ("laneserve_prompt_cache_entries", "K/V pages held by the lanes' prefix trees", "prompt_cache_entries",
     True),
    ("laneserve_prompt_cache_hits", "Prompts that reused at least a page of cached K/V", "prompt_cache_hits", False),
    ("laneserve_prompt_cache_hit_tokens", "Prompt tokens not prefilled thanks to the prompt cache",
     "prompt_cache_hit_tokens", False),
    ("laneserve_prompt_cache_stores", "K/V pages stored in the prompt cache", "prompt_cache_stores", False),
    ("laneserve_prompt_cache_evictions", "Cached K/V pages dropped for room or the budget", "prompt_cache_evictions",
     False),
    ("laneserve_kv_pages_free", "K/V pool pages no sequence or cached prefix holds", "kv_pages_free", True),
    ("laneserve_kv_pages", "K/V pool pages of the lanes (64 positions each)", "kv_pages_total", True),
    ("laneserve_kv_window_pages_free", "Free pages of the sliding-window layers' K/V pools", "kv_window_pages_free",
     True),
    ("laneserve_kv_window_pages", "K/V pages of the sliding-window layers' pools (0: no such layers)",
     "kv_window_pages_total", True),
    ("laneserve_prompt_cache_disk_reads", "Cached K/V pages read back from --prefix-cache-dir",
     "prompt_cache_disk_reads", False),
    ("laneserve_prompt_cache_disk_writes", "Cached K/V pages written to --prefix-cache-dir",
     "prompt_cache_disk_writes", False),
    ("laneserve_prompt_cache_disk_bytes", "Bytes of the lanes' page files in --prefix-cache-dir",
     "prompt_cache_disk_bytes", True),
    ("laneserve_prompt_cache_disk_budget_bytes", "Byte budget of those page files (0: no disk tier)",
     "prompt_cache_disk_budget_bytes", True),
)


def _prompt_cache_families(per_model: dict):
    for name, doc, field, is_gauge in PROMPT_CACHE_METRICS:
        family = (GaugeMetricFamily if is_gauge else CounterMetricFamily)(name, doc, labels=["model"])
        for model, st in sorted(per_model.items()):
            family.add_metric([model], getattr(st, field))
        yield family


class Metrics:
    def __init__(self, state) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("laneserve_requests", "Finished requests", ["route", "model", "adapter", "outcome"],
                                registry=r)
        self.rejected = Counter("laneserve_rejected", "Requests rejected before reaching a lane",
                                ["model", "reason"], registry=r)
        self.active = Gauge("laneserve_active_requests", "Requests being served", ["model"], registry=r)
        self.admission = Histogram("laneserve_admission_seconds", "Arrival to lane admission", ["model"],
                                   buckets=LATENCY_BUCKETS_S, registry=r)
        self.queue_wait = Histogram("laneserve_queue_wait_seconds", "Time queued for a sequence slot", ["model"],
                                    buckets=LATENCY_BUCKETS_S, registry=r)
        self.inference = Histogram("laneserve_inference_seconds", "Admission to last token relayed", ["model"],
                                   buckets=LATENCY_BUCKETS_S, registry=r)
        self.ttft = Histogram("laneserve_time_to_first_token_seconds", "Arrival to first content relayed",
                              ["model"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.prefill = Histogram("laneserve_lane_prefill_seconds", "Lane-reported prompt processing time",
                                 ["model"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.decode = Histogram("laneserve_lane_decode_seconds", "Lane-reported decode time", ["model"],
                                buckets=LATENCY_BUCKETS_S, registry=r)
        self.prompt_tokens = Counter("laneserve_prompt_tokens", "Prompt tokens processed", ["model", "adapter"],
                                     registry=r)
        self.cached_tokens = Counter("laneserve_cached_prompt_tokens", "Prompt tokens served from the prefix cache",
                                     ["model", "adapter"], registry=r)
        self.completion_tokens = Counter("laneserve_completion_tokens", "Tokens generated", ["model", "adapter"],
                                         registry=r)
        self.socket_full = Counter("laneserve_socket_full_writes",
                                   "Natively relayed batches a client's socket did not take at once (slow readers)",
                                   ["model"], registry=r)
        r.register(_ServingCollector(state))

    def observe_queue_wait(self, model: str, seconds: float) -> None:
        self.queue_wait.labels(model).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
