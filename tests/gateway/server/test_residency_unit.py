"""gateway.server.residency's decisions without processes: a fake pool (slots and requests in
flight per model) and recorded loads/unloads, with the real admission queue."""
from __future__ import annotations

import asyncio

import pytest

from gateway.serve.admission import AdmissionQueue, ModelLoadFailed
from gateway.serve.lanes import LaneBusy, LaneStartupError
from gateway.server import residency as residency_module
from gateway.server.residency import LOADED, UNLOADED, Resident, Residency

SLOTS = 2


class FakePool:
    def __init__(self, loaded: set[str]) -> None:
        self.loaded = set(loaded)
        self.in_flight: dict[str, int] = {}
        self.events: list[str] = []
        self.failing: set[str] = set()
        self.on_capacity = None

    def capacity(self, model: str) -> tuple[int, int]:
        return self.in_flight.get(model, 0), SLOTS if model in self.loaded else 0

    def submit(self, model: str) -> str:
        if model not in self.loaded or self.in_flight.get(model, 0) >= SLOTS:
            raise LaneBusy("no slot")
        self.in_flight[model] = self.in_flight.get(model, 0) + 1
        return model

    def finish(self, model: str) -> None:
        self.in_flight[model] -= 1
        self.on_capacity(model)


@pytest.fixture
def setup(monkeypatch):
    made = []

    def make(loaded: set[str], on_demand: dict[str, float | None], max_loaded: int = 1):
        pool = FakePool(loaded)

        async def load(p, model):
            await asyncio.sleep(0.01)
            p.events.append(f"load {model}")
            if model in p.failing:
                raise LaneStartupError(f"{model} is broken")
            p.loaded.add(model)

        async def unload(p, model):
            await asyncio.sleep(0.01)
            p.events.append(f"unload {model}")
            p.loaded.discard(model)

        monkeypatch.setattr(residency_module, "load_model", load)
        monkeypatch.setattr(residency_module, "unload_model", unload)
        residents = {name: Resident(name, False, None, status=LOADED) for name in loaded}
        residents.update({name: Resident(name, True, keep_s) for name, keep_s in on_demand.items()})
        residency = Residency(pool, None, residents, max_loaded, on_loaded=lambda name: None)
        admission = residency.admission = AdmissionQueue(8, 5.0, serving=residency.can_wait,
                                                         accepting=residency.accepting)

        def on_capacity(model):
            admission.notify(model)
            residency.capacity_changed(model)

        pool.on_capacity = on_capacity
        residency.start()
        made.append(residency)
        return pool, residency, admission

    yield make
    for residency in made:
        residency.close()


async def test_a_request_for_another_model_waits_while_the_busy_one_finishes_and_swaps(setup):
    pool, residency, admission = setup({"a"}, {"b": 300.0})
    assert await admission.admit("a", lambda: pool.submit("a")) == "a"
    assert await admission.admit("a", lambda: pool.submit("a")) == "a"
    b = asyncio.ensure_future(admission.admit("b", lambda: pool.submit("b")))
    await asyncio.sleep(0.05)
    assert not b.done() and pool.events == []  # a is busy: chosen, not yet unloaded
    late_a = asyncio.ensure_future(admission.admit("a", lambda: pool.submit("a")))
    await asyncio.sleep(0.02)
    assert not late_a.done()  # a free slot of a, but it arrived after a was chosen to make room
    pool.finish("a")
    pool.finish("a")
    assert await asyncio.wait_for(b, 2) == "b"
    assert pool.events == ["unload a", "load b"]
    pool.finish("b")  # b idle: the waiting request for a swaps them back
    assert await asyncio.wait_for(late_a, 2) == "a"
    assert pool.events == ["unload a", "load b", "unload b", "load a"]
    assert residency.residents["b"].status == UNLOADED


async def test_a_failed_load_ends_every_waiter_and_the_next_request_retries(setup):
    pool, residency, admission = setup(set(), {"x": 300.0}, max_loaded=0)
    pool.failing.add("x")
    waiters = [asyncio.ensure_future(admission.admit("x", lambda: pool.submit("x"))) for _ in range(3)]
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, ModelLoadFailed) and "x is broken" in str(r) for r in results)
    assert pool.events == ["load x"] and residency.describe("x")["error"] == "x is broken"
    pool.failing.clear()
    assert await asyncio.wait_for(admission.admit("x", lambda: pool.submit("x")), 2) == "x"
    assert pool.events == ["load x", "load x"]


async def test_idle_models_unload_after_their_keep_alive_and_kept_ones_stay(setup):
    pool, residency, admission = setup({"eager"}, {"lazy": 0.05}, max_loaded=0)
    assert await asyncio.wait_for(admission.admit("lazy", lambda: pool.submit("lazy")), 2) == "lazy"
    assert residency.describe("lazy")["in_use"] is True
    pool.finish("lazy")
    await asyncio.sleep(0.2)
    assert residency.residents["lazy"].status == UNLOADED
    assert residency.residents["eager"].status == LOADED and residency.expires_in_s("eager") is None
    residency.set_keep_alive("eager", 0.0)  # Ollama's keep_alive 0 on a --model model
    await asyncio.sleep(0.1)
    assert pool.events == ["load lazy", "unload lazy", "unload eager"]
