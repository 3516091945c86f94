"""Which LoRA adapters a request runs with, under every API's name for it.

The lanes hold the adapters (lanes.pool.LanePool.adapters: id, name, path per model); this keeps
what the HTTP APIs set on top:
  * vLLM: an adapter's name is a model name — a request for `model: NAME` runs on the adapter's
    base model with that adapter at scale 1;
  * SiMa (`POST /set_lora`): a model's default adapter, for requests that name the base model;
  * llama-server (`POST /lora-adapters`): global scales per adapter id, for requests that name the
    base model and have no default; all 0 until set, so the base model stays the base model;
    and a request's own `"lora": [{"id", "scale"}]`, which replaces them (ids left out: scale 0;
    an empty list: the global scales), as llama-server reads it.
Several adapters add up. The event loop owns this state; requests that already started keep
the adapters they started with.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gateway.http.errors import invalid

MAX_REQUEST_ADAPTERS = 8


@dataclass(frozen=True)
class Found:
    model: str    # the base model's name
    adapter: object  # lanes.api.AdapterInfo


@dataclass
class LoraSettings:
    default: dict = field(default_factory=dict)  # model name → adapter name (SiMa's set_lora)
    scales: dict = field(default_factory=dict)   # adapter id → scale for requests naming the base

    @staticmethod
    def loaded(pool, model: str) -> list:
        if pool is None or not hasattr(pool, "adapters"):
            return []
        try:
            return pool.adapters(model)
        except KeyError:  # an audio model, or one the pool does not know
            return []

    def find(self, pool, models, name: str) -> Found | None:
        """The adapter served under `name` (a model name that is an adapter's)."""
        for model in models:
            for adapter in self.loaded(pool, model):
                if adapter.name == name:
                    return Found(model, adapter)
        return None

    def forget(self, model: str, adapter) -> None:
        """An adapter went away: it is no longer anyone's default, its scale goes."""
        if self.default.get(model) == adapter.name:
            del self.default[model]
        self.scales.pop(adapter.id, None)

    def label(self, pool, model: str, lora) -> str:
        """The metrics' `adapter` label of a request running with `lora` ((id, scale) pairs): its adapters'
        names in id order joined by "+", "" for the base weights. Only loaded adapters' names, which
        the operator chose (--lora, --lora-dir), so user input cannot add series."""
        names = {a.id: a.name for a in self.loaded(pool, model)}
        return "+".join(names.get(i, str(i)) for i in sorted({i for i, _ in lora}))

    def selection(self, pool, model: str, requested: str, request_lora=None) -> tuple[tuple[int, float], ...]:
        """(adapter id, scale) pairs for a request that asked for `requested` and resolved to `model`."""
        loaded = self.loaded(pool, model)
        by_id = {a.id: a for a in loaded}
        if request_lora:
            for adapter_id, _ in request_lora:
                if adapter_id not in by_id:
                    raise invalid(f"'lora' names adapter id {adapter_id}, which model {model!r} does not have "
                                  "(GET /lora-adapters lists them)", param="lora")
            return tuple((i, s) for i, s in request_lora if s != 0)
        if requested != model:
            return tuple((a.id, 1.0) for a in loaded if a.name == requested)
        default = self.default.get(model)
        if default is not None:
            return tuple((a.id, 1.0) for a in loaded if a.name == default)
        return tuple((i, s) for i, s in sorted(self.scales.items()) if s != 0 and i in by_id)


def parse_request_lora(value) -> tuple[tuple[int, float], ...] | None:
    """llama-server's per-request `"lora": [{"id": N, "scale": S}]`; None when absent."""
    if value is None:
        return None
    if type(value) is not list or len(value) > MAX_REQUEST_ADAPTERS:
        raise invalid(f"'lora' must be an array of at most {MAX_REQUEST_ADAPTERS} {{\"id\", \"scale\"}} objects",
                      param="lora", code="invalid_type")
    out = {}
    for i, entry in enumerate(value):
        adapter_id = entry.get("id") if type(entry) is dict else None
        scale = entry.get("scale", 1.0) if type(entry) is dict else None
        if type(adapter_id) is not int or adapter_id < 1 or type(scale) not in (int, float) or not -100 <= scale <= 100:
            raise invalid("each 'lora' entry is {\"id\": adapter id, \"scale\": a number in [-100, 100]}",
                          param=f"lora[{i}]")
        if set(entry) - {"id", "scale"}:
            raise invalid("a 'lora' entry has only 'id' and 'scale'", param=f"lora[{i}]", code="unknown_parameter")
        out[adapter_id] = float(scale)
    return tuple(out.items())


LORA_SHAPE = {"type": ["array", "null"], "maxItems": MAX_REQUEST_ADAPTERS, "items": {
    "type": "object", "required": ["id"], "additionalProperties": False,
    "properties": {"id": {"type": "integer", "minimum": 1}, "scale": {"type": "number", "minimum": -100,
                                                                      "maximum": 100}}}}
