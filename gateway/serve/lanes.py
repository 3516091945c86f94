"""The gateway's only doorway to lanes.pool (the supervisor and its request streams).

Everything else in gateway/ imports lane types from here, so the lane API is pinned in one
place and the rest of the gateway can be unit-tested without the lanes package.
"""
from __future__ import annotations

import dataclasses
import os

from lanes.api import ReasoningMarkers  # noqa: F401  (re-exported)
from lanes.lane_stats import per_model as stats_per_model  # noqa: F401  (re-exported)
from lanes.model_files import find_model_file
from lanes.residency import load_model, resident_bytes, unload_model  # noqa: F401  (re-exported)
from lanes.registry import SMOLLM2
from lanes.wire import BATCH_TOKEN_BOUNDS, CHANNELS, CONTENT, FINISH_CODES, STEP_TIME_BOUNDS_NS  # noqa: F401  (re-exported)
from lanes.wire import MAX_CHOICES as MAX_LANE_CHOICES  # noqa: F401  (re-exported)
from lanes.pool import (  # noqa: F401  (re-exported)
    LANE_STATES,
    SERVING_STATES,
    ChoiceDone,
    Chunk,
    Embedding,
    Framing,
    RepeatedFraming,
    NumberedFraming,
    GenerationParams,
    LaneBusy,
    LaneError,
    LaneModelSpec,
    LanePool,
    LaneStartupError,
    LaneStatus,
    RequestStream,
    ScoredChunk,
)

from gateway.lora.startup import adapters_by_model
from gateway.server.config import KV_MEMORY_FRACTION, MAX_AUTO_SLOTS, GatewayConfig
from gateway.http.fields import F32_TINY, as_float32
from gateway.text.gguf_meta import read_model_meta
from gateway.openai.requests import Sampling


SYNTHETIC_PREFIX = "synthetic:"


def is_synthetic(source: str) -> bool:
    """`synthetic:step_us=…` is the lanes' deterministic test/benchmark backend (no weights):
    it exercises the whole serving path — rings, relay, faults — without a model."""
    return source.startswith(SYNTHETIC_PREFIX)


def resolve_model_paths(entries) -> dict[str, str]:
    """Model name → GGUF path (or synthetic spec) of --model entries; FileNotFoundError with an
    install hint."""
    return {entry.name: entry.source if is_synthetic(entry.source) else str(find_model_file(entry.source))
            for entry in entries}


def model_kind(lane_path: str) -> str:
    """'audio' for a speech-to-text model directory (lanes/audio/), else 'text'."""
    from pathlib import Path

    from lanes.audio.model_files import is_audio_model_dir

    return "audio" if not is_synthetic(lane_path) and is_audio_model_dir(Path(lane_path)) else "text"


AUDIO_CTX_SIZE = 448  # Whisper's decoder context; sizes the (tiny) request ring of an audio lane


def text_model_path(lane_path: str) -> str:
    """The GGUF whose tokenizer and chat template the gateway uses for a lane's model; a
    synthetic lane has no vocabulary of its own and borrows SmolLM2's."""
    return str(find_model_file(SMOLLM2.name)) if is_synthetic(lane_path) else lane_path


def memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def slots_for(config: GatewayConfig, path: str, num_models: int) -> int:
    """Sequence slots per lane: --parallel, or automatically MAX_AUTO_SLOTS, fewer only when the
    K/V cache of every lane (replicas × models × slots × ctx_size × bytes per token) would pass
    KV_MEMORY_FRACTION of this machine's memory. The cache is reserved, not resident: pages
    commit as sequences fill them."""
    if config.parallel:
        return config.parallel
    if config.kv_cache_mib:  # the pool's size no longer follows the slot count
        return MAX_AUTO_SLOTS
    if is_synthetic(path):
        return MAX_AUTO_SLOTS
    try:
        per_token = read_model_meta(path).kv_bytes_per_token
    except ValueError:  # a broken file: its own load reports why
        return MAX_AUTO_SLOTS
    if not per_token:
        return MAX_AUTO_SLOTS
    lanes = config.replicas * num_models
    fit = int(memory_bytes() * KV_MEMORY_FRACTION) // (lanes * config.ctx_size * per_token)
    return max(1, min(MAX_AUTO_SLOTS, fit))


def resident_models(config: GatewayConfig, paths: dict[str, str]) -> int:
    """How many of these models can be loaded at once (--models-max caps it): what the cores and
    the K/V memory are shared among."""
    return min(len(paths), config.models_max) if config.models_max else len(paths)


def lane_specs(config: GatewayConfig, paths: dict[str, str], vision: dict | None = None) -> list[LaneModelSpec]:
    """vision: model name → gateway.vision.serving.LaneNeeds of its projector (request ring, step budget)."""
    specs = []
    vision = vision or {}
    num_models = resident_models(config, paths)
    lora = adapters_by_model(config, {n: p for n, p in paths.items()
                                      if not is_synthetic(p) and model_kind(p) == "text"}) if config.lora else {}
    for name, path in paths.items():
        if model_kind(path) == "audio":
            # One transcription at a time per lane: it uses all of the lane's threads.
            specs.append(LaneModelSpec(name=name, path=path, replicas=config.replicas,
                                       threads=config.audio_lane_threads(num_models), ctx_size=AUDIO_CTX_SIZE, num_slots=1,
                                       max_batch_tokens=1, kind="audio"))
            continue
        slots = slots_for(config, path, num_models)
        needs = vision.get(name)
        image_step = needs.step_tokens if needs else 0  # a gemma3 image is prefilled in one step
        specs.append(LaneModelSpec(name=name, path=path, replicas=config.replicas, threads=config.lane_threads(num_models),
                                   ctx_size=config.ctx_size, num_slots=slots,
                                   max_batch_tokens=max(config.max_batch_tokens, slots + image_step),
                                   image_n_embd=needs.image_n_embd if needs else 0,
                                   repack_cache_dir=config.repack_cache_path(), lora=lora.get(name, ()),
                                   prompt_cache_mib=config.cache_ram_mib, kv_cache_mib=config.kv_cache_mib,
                                   prefix_cache_dir=config.prefix_cache_path(),
                                   prefix_cache_disk_mib=config.prefix_cache_disk_mib))
    return specs


def create_pool(config: GatewayConfig, paths: dict[str, str], deferred: tuple[str, ...] = (),
                vision: dict | None = None) -> LanePool:
    """deferred: models whose lanes load on demand (gateway.server.residency), not at start; vision: as lane_specs."""
    return LanePool(lane_specs(config, paths, vision), heartbeat_timeout_s=config.heartbeat_timeout_s,
                    deferred=deferred)


REASONING = CHANNELS["reasoning"]

# A choice's finish_reason as clients see it: the lane's reasons, and "tool_calls" for a choice
# that made calls (the gateway's tool-call parser decides it).
TOOL_CALLS_FINISH = "tool_calls"
FINISH_REASONS = tuple(name for name in FINISH_CODES if name != "none") + (TOOL_CALLS_FINISH,)

_SHARED_PARAMS = tuple(f.name for f in dataclasses.fields(GenerationParams)
                       if f.name not in ("max_tokens", "min_tokens") and f.name in {g.name for g in dataclasses.fields(Sampling)})


def engine_top_p(top_p: float) -> float:
    """top_p 0 (OpenAI and Ollama accept it) means "only the most likely token"; the engine's
    sampler needs p > 0 as a float32 (it answered 0 with an engine error), and keeps exactly one
    token at its smallest positive value."""
    return top_p if as_float32(top_p) > 0.0 else F32_TINY


def generation_params(sampling: Sampling, max_tokens: int, reasoning: ReasoningMarkers | None = None, *,
                      prompt_logprobs: bool = False, images: tuple = ()) -> GenerationParams:
    """The lane parameters: every sampling field the request carries, by name (Sampling uses
    GenerationParams' names), with the resolved token budget; the rest keep their defaults.
    prompt_logprobs (completions echo): the lane scores the prompt too (logprobs then on); images: the
    prompt's lanes.api.PromptImages (gateway.vision.request)."""
    shared = {name: getattr(sampling, name) for name in _SHARED_PARAMS}
    shared["top_p"] = engine_top_p(sampling.top_p)
    if prompt_logprobs and shared.get("logprobs") is None:
        shared["logprobs"] = 0
    return GenerationParams(max_tokens=max_tokens, min_tokens=min(sampling.min_tokens, max_tokens),
                            reasoning=reasoning, prompt_logprobs=prompt_logprobs, images=images, **shared)


__all__ = [
    "LANE_STATES", "SERVING_STATES", "ChoiceDone", "Chunk", "Embedding", "Framing", "GenerationParams", "RepeatedFraming", "NumberedFraming", "LaneBusy",
    "LaneError", "LaneModelSpec", "LanePool", "LaneStartupError", "LaneStatus", "REASONING", "ReasoningMarkers",
    "RequestStream", "ScoredChunk", "create_pool", "generation_params", "is_synthetic", "model_kind",
    "lane_specs", "resolve_model_paths", "text_model_path",
]
