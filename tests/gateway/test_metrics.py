"""Prometheus exposition: laneserve_ prefix, lane gauges read from the supervisor at scrape time."""
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import Metrics


@dataclass
class Status:
    model: str
    index: int
    state: str
    pid: int | None
    restarts: int


def samples(metrics):
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_all_names_are_prefixed_and_lane_states_reported():
    statuses = [Status("smollm2", 0, "busy", 10, 0), Status("smollm2", 1, "ready", 11, 2)]
    metrics = Metrics(lambda: statuses)
    metrics.requests.labels("chat", "smollm2", "success").inc()
    metrics.admission.labels("smollm2").observe(0.001)
    got = samples(metrics)
    assert all(name.startswith("laneserve_") for name, _ in got)
    assert got[("laneserve_lanes", (("model", "smollm2"), ("state", "busy")))] == 1
    assert got[("laneserve_lanes", (("model", "smollm2"), ("state", "failed")))] == 0
    assert got[("laneserve_lane_restarts_total", (("model", "smollm2"),))] == 2
    assert got[("laneserve_requests_total", (("model", "smollm2"), ("outcome", "success"), ("route", "chat")))] == 1
    statuses[0].state = "restarting"
    assert samples(metrics)[("laneserve_lanes", (("model", "smollm2"), ("state", "restarting")))] == 1


def test_two_instances_do_not_collide():
    Metrics(lambda: []).requests.labels("chat", "m", "success").inc()
    assert ("laneserve_requests_total", (("model", "m"), ("outcome", "success"), ("route", "chat"))) not in samples(
        Metrics(lambda: []))
