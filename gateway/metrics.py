"""Prometheus metrics, all prefixed `laneserve_`; labels are model/route/outcome/state only —
never request ids or text. Lane gauges and restart counts are read from the supervisor at
scrape time, so they cannot drift from what /health/ready reports."""
from __future__ import annotations

from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
LANE_STATES = ("starting", "ready", "busy", "restarting", "failed")


class _LaneCollector:
    """Reads (model, index, state, restarts) tuples from the supervisor on each scrape."""

    def __init__(self, read_statuses: Callable[[], Iterable]) -> None:
        self._read = read_statuses

    def collect(self):
        lanes = GaugeMetricFamily("laneserve_lanes", "Lanes by model and state", labels=["model", "state"])
        restarts = CounterMetricFamily("laneserve_lane_restarts", "Lane respawns by model", labels=["model"])
        counts: dict[tuple[str, str], int] = {}
        restart_totals: dict[str, int] = {}
        for status in self._read():
            for state in LANE_STATES:
                counts.setdefault((status.model, state), 0)
            counts[(status.model, status.state)] = counts.get((status.model, status.state), 0) + 1
            restart_totals[status.model] = restart_totals.get(status.model, 0) + status.restarts
        for (model, state), value in sorted(counts.items()):
            lanes.add_metric([model, state], value)
        for model, value in sorted(restart_totals.items()):
            restarts.add_metric([model], value)
        yield lanes
        yield restarts


class Metrics:
    def __init__(self, read_statuses: Callable[[], Iterable]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("laneserve_requests", "Finished requests", ["route", "model", "outcome"], registry=r)
        self.rejected = Counter("laneserve_rejected", "Requests rejected before reaching a lane",
                                ["model", "reason"], registry=r)
        self.active = Gauge("laneserve_active_requests", "Requests being served", ["model"], registry=r)
        self.admission = Histogram("laneserve_admission_seconds", "Arrival to lane admission", ["model"],
                                   buckets=LATENCY_BUCKETS_S, registry=r)
        self.inference = Histogram("laneserve_inference_seconds", "Admission to last token relayed", ["model"],
                                   buckets=LATENCY_BUCKETS_S, registry=r)
        self.ttft = Histogram("laneserve_time_to_first_token_seconds", "Arrival to first content relayed",
                              ["model"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.prefill = Histogram("laneserve_lane_prefill_seconds", "Lane-reported prompt processing time",
                                 ["model"], buckets=LATENCY_BUCKETS_S, registry=r)
        self.decode = Histogram("laneserve_lane_decode_seconds", "Lane-reported decode time", ["model"],
                                buckets=LATENCY_BUCKETS_S, registry=r)
        self.prompt_tokens = Counter("laneserve_prompt_tokens", "Prompt tokens processed", ["model"], registry=r)
        self.completion_tokens = Counter("laneserve_completion_tokens", "Tokens generated", ["model"], registry=r)
        self.socket_full = Counter("laneserve_socket_full_writes",
                                   "Natively relayed batches a client's socket did not take at once (slow readers)",
                                   ["model"], registry=r)
        r.register(_LaneCollector(read_statuses))

    def render(self) -> bytes:
        return generate_latest(self.registry)
