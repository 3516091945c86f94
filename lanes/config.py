"""What lanes are started with — a model's lane spec and the pool's tuning — as frozen, validated
dataclasses (pure Python: the gateway's settings take their defaults from here); the only place lanes/
reads environment variables."""
from __future__ import annotations

import os
from dataclasses import dataclass, fields

ENV_PREFIX = "LANESERVE_LANES_"
DOORBELLS = ("eventfd", "semaphore")
LANE_KINDS = ("text", "audio")  # text: the native GGUF lane; audio: lanes/audio (speech to text)


@dataclass(frozen=True)
class LaneModelSpec:
    name: str
    path: str            # GGUF path, or "synthetic:..." (test/benchmark backend, see csrc/lane)
    replicas: int = 1
    threads: int = 1
    ctx_size: int = 4096     # per sequence slot
    num_slots: int = 8       # sequences one replica serves at once (one forward pass per step)
    max_batch_tokens: int = 256  # per-step token budget: decode tokens + one prefill chunk
    kind: str = "text"       # LANE_KINDS
    repack_cache_dir: str = ""  # shared repacked weights (csrc/model/repack_store.h); "" = lane-private
    # LoRA adapters (GGUF) every lane loads before its handshake: (name, path) pairs; a bad file
    # fails only that adapter (LanePool.adapter_errors). More are loaded at run time with
    # LanePool.load_adapter.
    lora: tuple[tuple[str, str], ...] = ()
    # K/V page pool (csrc/engine/page_pool.h): kv_cache_mib for running sequences (0: a whole context
    # per slot) + prompt_cache_mib for cached prefixes no sequence maps (csrc/engine/prefix_tree.h; 0 = off).
    kv_cache_mib: int = 0
    prompt_cache_mib: int = 0
    # The prefix cache's disk tier (csrc/engine/disk_tier.h): whole base-model prefix pages also go to
    # files here (at most prefix_cache_disk_mib per lane) and are read back on a RAM miss; "" = off.
    prefix_cache_dir: str = ""
    prefix_cache_disk_mib: int = 4096
    # Width of the image embeddings requests may carry (a vision projector's output, = the text model's
    # n_embd); sizes the request ring for prompts made of image rows (lanes.channels). 0 = text only.
    image_n_embd: int = 0

    def __post_init__(self) -> None:
        if self.kind not in LANE_KINDS:
            raise ValueError(f"kind must be one of {LANE_KINDS}, got {self.kind!r}")
        if not 1 <= self.num_slots <= 256:
            raise ValueError(f"num_slots must be in [1, 256], got {self.num_slots}")
        if self.max_batch_tokens < self.num_slots:
            raise ValueError(f"max_batch_tokens ({self.max_batch_tokens}) must be >= num_slots ({self.num_slots})")
        if not self.name:
            raise ValueError("model name must be non-empty")
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0, got {self.threads}")
        if self.image_n_embd < 0:
            raise ValueError(f"image_n_embd must be >= 0, got {self.image_n_embd}")
        if self.ctx_size < 16:
            raise ValueError(f"ctx_size must be >= 16, got {self.ctx_size}")
        names = [name for name, _ in self.lora]
        if any(not n for n in names) or len(set(names)) != len(names):
            raise ValueError(f"LoRA adapter names must be non-empty and distinct, got {names}")


@dataclass(frozen=True)
class PoolConfig:
    heartbeat_timeout_s: float = 5.0       # a lane silent this long (outside a long prefill) is hung
    doorbell: str = "eventfd"              # output-ring wake-up on the gateway side (see README)
    startup_timeout_s: float = 300.0       # model load + handshake
    shutdown_grace_s: float = 2.0          # SHUTDOWN → exit, before SIGTERM then SIGKILL
    max_load_failures: int = 3             # consecutive failed loads → lane state "failed"
    backoff_initial_s: float = 0.25        # respawn delay, doubled per consecutive crash
    backoff_max_s: float = 30.0
    stable_after_s: float = 60.0           # a lane up this long resets its backoff
    output_ring_bytes: int = 1 << 20       # data capacity of each lane → gateway ring
    max_pending_bytes: int = 1 << 20       # per-request lane-side backlog before ERROR(output_overflow)
    prefill_budget_ns_per_token: int = 20_000_000  # hang-check allowance during prefill
    shm_dir: str = "/dev/shm"

    def __post_init__(self) -> None:
        if self.doorbell not in DOORBELLS:
            raise ValueError(f"doorbell must be one of {DOORBELLS}, got {self.doorbell!r}")
        for name in ("heartbeat_timeout_s", "startup_timeout_s", "shutdown_grace_s", "backoff_initial_s",
                     "backoff_max_s", "stable_after_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("backoff_max_s must be >= backoff_initial_s")
        if self.max_load_failures < 1:
            raise ValueError("max_load_failures must be >= 1")
        cap = self.output_ring_bytes
        if cap < 4096 or cap & (cap - 1):
            raise ValueError(f"output_ring_bytes must be a power of two >= 4096, got {cap}")
        if self.max_pending_bytes < 4096:
            raise ValueError("max_pending_bytes must be >= 4096")
        if self.prefill_budget_ns_per_token < 0:
            raise ValueError("prefill_budget_ns_per_token must be >= 0")


def config_from_env(environ=None, **overrides) -> PoolConfig:
    """PoolConfig from LANESERVE_LANES_<FIELD> variables (e.g. LANESERVE_LANES_DOORBELL=semaphore),
    then explicit overrides."""
    env = os.environ if environ is None else environ
    values = {}
    for f in fields(PoolConfig):
        raw = env.get(ENV_PREFIX + f.name.upper())
        if raw is not None:
            values[f.name] = type(f.default)(raw)
    values.update(overrides)
    return PoolConfig(**values)
