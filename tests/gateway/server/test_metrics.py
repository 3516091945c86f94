"""Prometheus exposition: laneserve_ prefix; lane, slot and queue gauges and the lanes' step
histograms read from the supervisor and the admission queue at scrape time."""
import dataclasses
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from gateway.server.metrics import Metrics
from lanes import wire


@dataclass
class Status:
    model: str
    index: int
    state: str
    pid: int | None
    restarts: int
    in_flight: int = 0
    num_slots: int = 0
    kv_cache_bytes: int = 0


class FakeAdmission:
    def __init__(self, depths=None):
        self._depths = depths or {}

    def depths(self):
        return dict(self._depths)


class FakePool:
    def __init__(self, stats=()):
        self.stats = list(stats)

    def lane_stats(self):
        return list(self.stats)


@dataclass
class FakeState:
    """What gateway.server.metrics reads from gateway.server.state.ServerState."""
    lanes: list = field(default_factory=list)
    admission: object = None
    pool: object = None

    def statuses(self):
        return list(self.lanes)


def samples(metrics):
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _stats(step_ns: list[int], batch_tokens: list[int], active=0, waiting=0) -> wire.Stats:
    def buckets(values, bounds):
        counts = [0] * wire.STEP_BUCKETS
        for v in values:
            i = next((k for k, b in enumerate(bounds) if v <= b), wire.STEP_BUCKETS - 1)
            counts[i] += 1
        return tuple(counts)
    return wire.Stats(len(step_ns), sum(step_ns), sum(batch_tokens), buckets(step_ns, wire.STEP_TIME_BOUNDS_NS),
                      buckets(batch_tokens, wire.BATCH_TOKEN_BOUNDS), active, waiting)


def test_all_names_are_prefixed_and_lane_states_reported():
    state = FakeState([Status("smollm2", 0, "busy", 10, 0, in_flight=3, num_slots=8),
                       Status("smollm2", 1, "ready", 11, 2, in_flight=0, num_slots=8)],
                      FakeAdmission(), FakePool())
    metrics = Metrics(state)
    metrics.requests.labels("chat", "smollm2", "", "success").inc()
    metrics.requests.labels("chat", "smollm2", "pirate", "success").inc(2)
    metrics.admission.labels("smollm2").observe(0.001)
    got = samples(metrics)
    assert all(name.startswith("laneserve_") for name, _ in got)
    assert got[("laneserve_lanes", (("model", "smollm2"), ("state", "busy")))] == 1
    assert got[("laneserve_lanes", (("model", "smollm2"), ("state", "failed")))] == 0
    assert got[("laneserve_lane_restarts_total", (("model", "smollm2"),))] == 2
    base = (("adapter", ""), ("model", "smollm2"), ("outcome", "success"), ("route", "chat"))
    assert got[("laneserve_requests_total", base)] == 1
    assert got[("laneserve_requests_total", (("adapter", "pirate"),) + base[1:])] == 2
    state.lanes[0].state = "restarting"
    assert samples(metrics)[("laneserve_lanes", (("model", "smollm2"), ("state", "restarting")))] == 1


def test_slots_in_use_and_queue_depth_per_model():
    lanes = [Status("a", 0, "busy", 10, 0, in_flight=8, num_slots=8),
             Status("a", 1, "busy", 11, 0, in_flight=5, num_slots=8),
             Status("b", 0, "ready", 12, 0, in_flight=0, num_slots=4),
             Status("b", 1, "restarting", None, 1, in_flight=0, num_slots=4)]  # not serving: no slots
    admission = FakeAdmission({"a": 3})
    metrics = Metrics(FakeState(lanes, admission, FakePool()))
    got = samples(metrics)
    assert got[("laneserve_slots", (("model", "a"),))] == 16
    assert got[("laneserve_slots_in_use", (("model", "a"),))] == 13
    assert got[("laneserve_slots", (("model", "b"),))] == 4
    assert got[("laneserve_slots_in_use", (("model", "b"),))] == 0
    assert got[("laneserve_queue_depth", (("model", "a"),))] == 3
    assert got[("laneserve_queue_depth", (("model", "b"),))] == 0
    admission._depths = {"a": 0, "b": 2}  # read at scrape time
    got = samples(metrics)
    assert got[("laneserve_queue_depth", (("model", "a"),))] == 0
    assert got[("laneserve_queue_depth", (("model", "b"),))] == 2
    metrics.observe_queue_wait("a", 0.2)
    assert samples(metrics)[("laneserve_queue_wait_seconds_count", (("model", "a"),))] == 1


def test_step_and_batch_histograms_sum_the_lanes_of_a_model():
    pool = FakePool([("a", _stats([800_000, 3_000_000], [1, 5])),
                     ("a", _stats([30_000_000], [300])),
                     ("b", _stats([2_000_000], [2]))])
    got = samples(Metrics(FakeState([Status("a", 0, "busy", 1, 0, 1, 8), Status("b", 0, "ready", 2, 0, 0, 8)],
                                    FakeAdmission(), pool)))
    a = (("model", "a"),)
    assert got[("laneserve_step_seconds_count", a)] == 3
    assert abs(got[("laneserve_step_seconds_sum", a)] - 0.0338) < 1e-9
    assert got[("laneserve_step_seconds_bucket", (("le", "0.001"), ("model", "a")))] == 1
    assert got[("laneserve_step_seconds_bucket", (("le", "0.005"), ("model", "a")))] == 2
    assert got[("laneserve_step_seconds_bucket", (("le", "+Inf"), ("model", "a")))] == 3
    assert got[("laneserve_batch_tokens_count", a)] == 3
    assert got[("laneserve_batch_tokens_sum", a)] == 306
    assert got[("laneserve_batch_tokens_bucket", (("le", "1"), ("model", "a")))] == 1
    assert got[("laneserve_batch_tokens_bucket", (("le", "256"), ("model", "a")))] == 2
    assert got[("laneserve_batch_tokens_bucket", (("le", "+Inf"), ("model", "a")))] == 3
    assert got[("laneserve_step_seconds_count", (("model", "b"),))] == 1


def test_a_state_without_pool_or_admission_still_renders():
    got = samples(Metrics(FakeState()))
    assert not any(name.startswith(("laneserve_lanes", "laneserve_slots")) for name, _ in got)


def test_two_instances_do_not_collide():
    Metrics(FakeState()).requests.labels("chat", "m", "", "success").inc()
    key = ("laneserve_requests_total", (("adapter", ""), ("model", "m"), ("outcome", "success"), ("route", "chat")))
    assert key not in samples(Metrics(FakeState()))


def test_prompt_cache_figures_are_summed_per_model():
    def lane(cache_bytes, entries, hits, hit_tokens, evictions):
        return dataclasses.replace(_stats([1000], [1]), prompt_cache_bytes=cache_bytes,
                                   prompt_cache_budget_bytes=1 << 30, prompt_cache_entries=entries,
                                   prompt_cache_hits=hits, prompt_cache_hit_tokens=hit_tokens,
                                   prompt_cache_stores=entries + evictions, prompt_cache_evictions=evictions)
    pool = FakePool([("smollm2", lane(3 << 20, 2, 4, 900, 1)), ("smollm2", lane(1 << 20, 1, 1, 100, 0)),
                     ("gemma", _stats([1000], [1]))])
    got = samples(Metrics(FakeState([], FakeAdmission(), pool)))
    m = (("model", "smollm2"),)
    assert got[("laneserve_prompt_cache_bytes", m)] == 4 << 20
    assert got[("laneserve_prompt_cache_budget_bytes", m)] == 2 << 30
    assert got[("laneserve_prompt_cache_entries", m)] == 3
    assert got[("laneserve_prompt_cache_hits_total", m)] == 5
    assert got[("laneserve_prompt_cache_hit_tokens_total", m)] == 1000
    assert got[("laneserve_prompt_cache_stores_total", m)] == 4
    assert got[("laneserve_prompt_cache_evictions_total", m)] == 1
    assert got[("laneserve_prompt_cache_budget_bytes", (("model", "gemma"),))] == 0  # cache off


def test_page_pools_are_reported_per_model():
    gemma = dataclasses.replace(_stats([1000], [1]), kv_pages_total=128, kv_pages_free=100, kv_window_pages_total=26,
                                kv_window_pages_free=17)
    pool = FakePool([("gemma", gemma), ("gemma", gemma), ("smollm2", dataclasses.replace(gemma, kv_window_pages_total=0,
                                                                                         kv_window_pages_free=0))])
    got = samples(Metrics(FakeState([], FakeAdmission(), pool)))
    g, s = (("model", "gemma"),), (("model", "smollm2"),)
    assert (got[("laneserve_kv_pages", g)], got[("laneserve_kv_pages_free", g)]) == (256, 200)
    assert (got[("laneserve_kv_window_pages", g)], got[("laneserve_kv_window_pages_free", g)]) == (52, 34)
    assert got[("laneserve_kv_window_pages", s)] == 0 and got[("laneserve_kv_pages", s)] == 128
