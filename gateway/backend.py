"""The gateway's only doorway to lanes.pool (the supervisor and its request streams).

Everything else in gateway/ imports lane types from here, so the lane API is pinned in one
place and the rest of the gateway can be unit-tested without the lanes package.
"""
from __future__ import annotations

import dataclasses

from lanes.model_files import find_model_file
from lanes.pool import (  # noqa: F401  (re-exported)
    ChoiceDone,
    Chunk,
    Framing,
    GenerationParams,
    LaneBusy,
    LaneError,
    LaneModelSpec,
    LanePool,
    LaneStartupError,
    LaneStatus,
    RequestStream,
)

from gateway.config import GatewayConfig
from gateway.openai_requests import Sampling


SYNTHETIC_PREFIX = "synthetic:"


def is_synthetic(source: str) -> bool:
    """`synthetic:step_us=…` is the lanes' deterministic test/benchmark backend (no weights):
    it exercises the whole serving path — rings, relay, faults — without a model."""
    return source.startswith(SYNTHETIC_PREFIX)


def resolve_model_paths(config: GatewayConfig) -> dict[str, str]:
    """Model name → GGUF path (or synthetic spec); FileNotFoundError with an install hint."""
    return {entry.name: entry.source if is_synthetic(entry.source) else str(find_model_file(entry.source))
            for entry in config.models}


def text_model_path(lane_path: str) -> str:
    """The GGUF whose tokenizer and chat template the gateway uses for a lane's model; a
    synthetic lane has no vocabulary of its own and borrows SmolLM2's."""
    return str(find_model_file("smollm2")) if is_synthetic(lane_path) else lane_path


def lane_specs(config: GatewayConfig, paths: dict[str, str]) -> list[LaneModelSpec]:
    return [
        LaneModelSpec(name=name, path=path, replicas=config.replicas, threads=config.lane_threads(),
                      ctx_size=config.ctx_size)
        for name, path in paths.items()
    ]


def create_pool(config: GatewayConfig, paths: dict[str, str]) -> LanePool:
    return LanePool(lane_specs(config, paths), heartbeat_timeout_s=config.heartbeat_timeout_s)


_SHARED_PARAMS = tuple(f.name for f in dataclasses.fields(GenerationParams) if f.name not in ("max_tokens", "min_tokens"))


def generation_params(sampling: Sampling, max_tokens: int) -> GenerationParams:
    """The lane parameters: every sampling field of the request by name (Sampling carries the
    same names), with the resolved token budget."""
    shared = {name: getattr(sampling, name) for name in _SHARED_PARAMS}
    return GenerationParams(max_tokens=max_tokens, min_tokens=min(sampling.min_tokens, max_tokens), **shared)


__all__ = [
    "ChoiceDone", "Chunk", "Framing", "GenerationParams", "LaneBusy", "LaneError", "LaneModelSpec", "LanePool",
    "LaneStartupError", "LaneStatus", "RequestStream", "create_pool", "generation_params", "is_synthetic",
    "lane_specs", "resolve_model_paths", "text_model_path",
]
