"""Gateway configuration: one frozen dataclass, validated at construction.

Every field has exactly one command-line flag (`--ctx-size` ↔ `ctx_size`) and one environment
variable (`LANESERVE_CTX_SIZE`); both arrive as strings and go through `config_from_strings`, so the
two launch paths (`laneserve serve` and `sanic gateway.app:create_app --factory`) cannot drift.
"""
from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Mapping

from lanes.config import LaneModelSpec, PoolConfig  # pure Python: the lanes' defaults, not the native runtime
from lanes.model_files import default_repack_cache_dir
from lanes.registry import KNOWN_MODELS, SMOLLM2
from gateway.server.entries import (MODEL_NAME_RE, ConfigError, LoraEntry, MmprojEntry, ModelEntry,  # noqa: F401
                                    check_adapter_name, parse_lora_arg, parse_mmproj_arg, parse_model_arg)

DEFAULT_MODEL = SMOLLM2.name
# parallel = 0 (automatic): this many sequence slots per lane, fewer only if the K/V cache of all
# lanes would pass this fraction of the machine's memory (gateway/serve/lanes.py: slots_for).
MAX_AUTO_SLOTS = LaneModelSpec.num_slots
KV_MEMORY_FRACTION = 0.5


API_KEY_MAX_CHARS = 4096


def check_api_key(key: str, source: str) -> str:
    """A key must fit an HTTP header as sent: 1-4096 printable ASCII characters, no spaces."""
    if not 1 <= len(key) <= API_KEY_MAX_CHARS or not all("!" <= c <= "~" for c in key):
        raise ConfigError(f"{source}: the key must be 1-{API_KEY_MAX_CHARS} printable ASCII characters "
                          "without spaces (an empty value does not turn authentication off: unset it)")
    return key


def available_cores() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise ConfigError(f"{name} must be > 0 (got {value})")


@dataclass(frozen=True)
class GatewayConfig:
    models: tuple[ModelEntry, ...] = (ModelEntry(DEFAULT_MODEL, DEFAULT_MODEL),)
    # Every GGUF in this directory is served on demand under its file stem (gateway/server/models_dir.py):
    # its lanes load on the first request and unload after idle_unload_s idle (gateway/server/residency.py).
    models_dir: str | None = None
    models_max: int = 0  # models loaded at once (LRU unload of idle ones beyond it); 0 = no cap
    idle_unload_s: float = 300.0  # an on-demand model idle this long unloads; < 0 = never (eager: never)
    replicas: int = 1
    threads: int = 0  # per lane; 0 = share this machine's cores evenly among all lanes
    ctx_size: int = LaneModelSpec.ctx_size  # per sequence slot
    # Sequence slots per lane (requests one forward pass serves at once); 0 = automatic:
    # MAX_AUTO_SLOTS, fewer only if the K/V cache would pass KV_MEMORY_FRACTION of the memory.
    parallel: int = 0
    max_batch_tokens: int = LaneModelSpec.max_batch_tokens  # per-step token budget: decode tokens + one prompt chunk
    max_queue: int = 64          # requests waiting per model once every slot is taken; beyond → 429
    queue_timeout_s: float = 60.0  # a queued request gets a slot within this long, else 429
    host: str = "127.0.0.1"
    port: int = 8000
    records: str | None = None
    lenient: bool = False
    cors_origins: tuple[str, ...] = ()
    # Optional API key (clients send `Authorization: Bearer KEY`); unset = no authentication.
    # Never in repr, logs or messages; the file form keeps it out of `ps` (see gateway/http/auth.py).
    api_key: str | None = field(default=None, repr=False)
    api_key_file: str | None = None
    max_body_bytes: int = 8 * 1024 * 1024
    # Audio routes (gateway/audio/): uploads up to this size (OpenAI's limit); decoded audio up to
    # this length; compute threads per audio lane (0 = the same even share as text lanes).
    max_audio_bytes: int = 25 * 1024 * 1024
    max_audio_s: float = 3600.0
    audio_threads: int = 0
    max_json_depth: int = 32
    max_n: int = 8
    # LoRA adapters (gateway/lora/): served at start, and a directory run-time loads may read from.
    lora: tuple[LoraEntry, ...] = ()
    lora_dir: str | None = None
    # Vision projectors (gateway/vision/): a --model's mmproj, whose requests may then carry images.
    mmproj: tuple[MmprojEntry, ...] = ()
    # The Responses API's stored responses (GET /v1/responses/{id}, previous_response_id): in memory,
    # at most this many, none older than this (gateway/responses/store.py).
    max_stored_responses: int = 1000
    stored_response_ttl_s: float = 3600.0
    keepalive_interval_s: float = 10.0
    drain_grace_s: float = 15.0
    # SIGTERM turns /health/ready to 503 at once but keeps accepting new requests this long before
    # refusing them (503), so a load balancer polling readiness stops sending work first (what a
    # Kubernetes preStop sleep does); 0 = refuse at once (one machine, no balancer).
    drain_delay_s: float = 0.0
    heartbeat_timeout_s: float = PoolConfig.heartbeat_timeout_s
    # A request's headers and body must arrive within this long of its first byte (slowloris).
    request_deadline_s: float = 10.0
    # A client whose socket stays full this long is cut off, so it cannot hold a lane forever.
    write_stall_timeout_s: float = 30.0
    retry_after_s: int = 1
    # Sanic's RESPONSE_TIMEOUT is an inactivity timer; a non-stream request sends nothing until it
    # is done, so it must outlast the longest generation we allow.
    response_timeout_s: float = 600.0
    # Where lanes share the repacked weights of each model file (one copy in the page cache for
    # every replica, and no repacking on later launches): a directory, "auto" (~/.cache/laneserve/
    # repack) or "off" (each lane repacks into its own memory).
    repack_cache_dir: str = "auto"
    # Per lane, the K/V page pool (csrc/engine/page_pool.h) is kv_cache_mib + cache_ram_mib, reserved
    # and committed only as filled. kv_cache_mib: what running sequences draw on (0: a whole context
    # per slot); cache_ram_mib: the budget of cached prefix pages no running sequence maps
    # (csrc/engine/prefix_tree.h), so a conversation's next turn skips the prefill it shares.
    kv_cache_mib: int = 0
    cache_ram_mib: int = 1024
    # The prefix cache's disk tier (csrc/engine/disk_tier.h): an existing, writable directory where
    # whole pages of base-model prefixes are also written and read back on a RAM miss (surviving a
    # restart with the same model file), at most prefix_cache_disk_mib of files per lane; "" = off.
    prefix_cache_dir: str = ""
    prefix_cache_disk_mib: int = 4096
    log_level: str = "info"
    log_format: str = "auto"  # auto: coloured console lines on a terminal, JSON lines otherwise

    def __post_init__(self) -> None:
        if not self.models:
            raise ConfigError("models: at least one model is required")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ConfigError(f"models: duplicate model names in {names}")
        projected = [e.model for e in self.mmproj]
        for name in projected:
            if name not in names:
                raise ConfigError(f"mmproj {name!r}: not a --model name (served: {', '.join(names)})")
        if len(set(projected)) != len(projected):
            raise ConfigError(f"mmproj: more than one projector for a model in {projected}")
        for name in ("replicas", "max_n", "retry_after_s", "max_json_depth", "max_batch_tokens"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1 (got {value!r})")
        if type(self.max_audio_bytes) is not int or self.max_audio_bytes < 1024:
            raise ConfigError(f"max_audio_bytes must be an integer >= 1024 (got {self.max_audio_bytes!r})")
        if type(self.audio_threads) is not int or not 0 <= self.audio_threads <= 256:
            raise ConfigError(f"audio_threads must be an integer in [0, 256], 0 = automatic (got {self.audio_threads!r})")
        if type(self.threads) is not int or not 0 <= self.threads <= 256:
            raise ConfigError(f"threads must be an integer in [0, 256], 0 = automatic (got {self.threads!r})")
        if type(self.parallel) is not int or not 0 <= self.parallel <= 256:
            raise ConfigError(f"parallel must be an integer in [0, 256], 0 = automatic (got {self.parallel!r})")
        if type(self.max_stored_responses) is not int or self.max_stored_responses < 0:
            raise ConfigError(f"max_stored_responses must be an integer >= 0 (got {self.max_stored_responses!r})")
        if type(self.models_max) is not int or self.models_max < 0:
            raise ConfigError(f"models_max must be an integer >= 0, 0 = no cap (got {self.models_max!r})")
        if self.models_dir is not None and not Path(self.models_dir).expanduser().is_dir():
            raise ConfigError(f"models_dir: {self.models_dir!r} is not a directory")
        if type(self.kv_cache_mib) is not int or not 0 <= self.kv_cache_mib <= 1 << 20:
            raise ConfigError(f"kv_cache_mib must be an integer in [0, 1048576], 0 = a whole context per slot "
                              f"(got {self.kv_cache_mib!r})")
        if type(self.cache_ram_mib) is not int or not 0 <= self.cache_ram_mib <= 1 << 20:
            raise ConfigError(f"cache_ram_mib must be an integer in [0, 1048576], 0 = off (got {self.cache_ram_mib!r})")
        if type(self.prefix_cache_disk_mib) is not int or not 0 <= self.prefix_cache_disk_mib <= 1 << 30:
            raise ConfigError(f"prefix_cache_disk_mib must be an integer in [0, 1073741824] "
                              f"(got {self.prefix_cache_disk_mib!r})")
        if self.prefix_cache_dir:
            path = self.prefix_cache_path()
            if not os.path.isdir(path) or not os.access(path, os.W_OK | os.X_OK):
                raise ConfigError(f"prefix_cache_dir: {self.prefix_cache_dir!r} is not an existing writable directory")
        if type(self.max_queue) is not int or self.max_queue < 0:
            raise ConfigError(f"max_queue must be an integer >= 0 (got {self.max_queue!r})")
        if type(self.ctx_size) is not int or not 16 <= self.ctx_size <= 1 << 20:
            raise ConfigError(f"ctx_size must be an integer in [16, 1048576] (got {self.ctx_size!r})")
        if not self.repack_cache_dir or "\0" in self.repack_cache_dir:
            raise ConfigError("repack_cache_dir: a directory, 'auto' or 'off'")
        if type(self.port) is not int or not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in [0, 65535] (got {self.port!r})")
        if not self.host:
            raise ConfigError("host must not be empty")
        if type(self.max_body_bytes) is not int or self.max_body_bytes < 1024:
            raise ConfigError(f"max_body_bytes must be an integer >= 1024 (got {self.max_body_bytes!r})")
        for name in ("keepalive_interval_s", "drain_grace_s", "heartbeat_timeout_s", "response_timeout_s",
                     "write_stall_timeout_s", "request_deadline_s", "queue_timeout_s", "max_audio_s",
                     "stored_response_ttl_s"):
            _positive(name, getattr(self, name))
        if not 0 <= self.drain_delay_s <= 300:
            raise ConfigError(f"drain_delay_s must be in [0, 300] (got {self.drain_delay_s!r})")
        if self.keepalive_interval_s >= self.response_timeout_s:
            # Keep-alives are what refresh Sanic's inactivity timer while deltas go out natively.
            raise ConfigError(f"keepalive_interval_s ({self.keepalive_interval_s}) must be below "
                              f"response_timeout_s ({self.response_timeout_s})")
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise ConfigError(f"log_level must be debug, info, warning or error (got {self.log_level!r})")
        if self.log_format not in ("auto", "json", "console"):
            raise ConfigError(f"log_format must be auto, json or console (got {self.log_format!r})")
        if self.api_key is not None and self.api_key_file is not None:
            raise ConfigError("api_key and api_key_file: give only one of them")
        self.resolved_api_key()  # a bad key or an unreadable file fails at start, not per request
        for origin in self.cors_origins:
            if origin != "*" and not re.match(r"^https?://[^\s/]+$", origin):
                raise ConfigError(f"cors_origins: {origin!r} is not '*' or a scheme://host[:port] origin")

    def resolved_api_key(self) -> str | None:
        """The API key from `api_key` or from the file `api_key_file` (surrounding whitespace, e.g.
        the newline of `echo KEY > file`, is dropped); None when neither is set. Error messages
        name the setting or the file, never the key."""
        if self.api_key is not None:
            return check_api_key(self.api_key, "api_key")
        if self.api_key_file is None:
            return None
        try:
            with open(self.api_key_file, "rb") as f:
                raw = f.read(API_KEY_MAX_CHARS + 64)
        except OSError as exc:
            raise ConfigError(f"api_key_file: cannot read {self.api_key_file!r} ({exc.strerror})") from None
        try:
            text = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise ConfigError(f"api_key_file {self.api_key_file!r}: the key must be printable ASCII") from None
        return check_api_key(text, f"api_key_file {self.api_key_file!r}")

    def prefix_cache_path(self) -> str:
        """prefix_cache_dir resolved for the lanes ("" = no disk tier)."""
        return str(Path(self.prefix_cache_dir).expanduser().resolve()) if self.prefix_cache_dir else ""

    def repack_cache_path(self) -> str:
        """repack_cache_dir resolved for the lanes ("" = no cache)."""
        if self.repack_cache_dir == "off":
            return ""
        if self.repack_cache_dir == "auto":
            return str(default_repack_cache_dir())
        return str(Path(self.repack_cache_dir).expanduser())

    def lane_threads(self, num_models: int | None = None) -> int:
        """Compute threads per lane: as configured, or the cores shared evenly among all lanes
        (lanes × threads ≤ cores keeps every lane's thread pool from fighting the others) of the
        num_models loaded at once (default: every --model)."""
        if self.threads:
            return self.threads
        return max(1, available_cores() // (self.replicas * (num_models or len(self.models))))

    def audio_lane_threads(self, num_models: int | None = None) -> int:
        """Threads per audio lane: --audio-threads, else the same even share as text lanes (an
        audio lane is one lane in the division, so a long transcription takes its share of the
        cores and no more)."""
        if self.audio_threads:
            return self.audio_threads
        return max(1, available_cores() // (self.replicas * (num_models or len(self.models))))


FIELDS = {f.name: f for f in dataclasses.fields(GatewayConfig)}
DEFAULT_URL = f"http://{FIELDS['host'].default}:{FIELDS['port'].default}"  # a server started with the defaults


def flag_name(field_name: str) -> str:
    return "--" + ("model" if field_name == "models" else field_name.replace("_", "-"))


def default_text(field_name: str) -> str:
    """A field's default as `laneserve serve --help` and gateway/README.md's settings table state it."""
    default = FIELDS[field_name].default
    if field_name == "models":
        return ",".join(e.source if e.name == e.source else f"{e.name}={e.source}" for e in default)
    if default is None or default is False or default == () or default == "":
        return "off"
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    if field_name.endswith("_bytes") and default % (1 << 20) == 0:
        return f"{default >> 20} MiB"
    return str(default)


def env_name(field_name: str) -> str:
    return "LANESERVE_" + ("MODEL" if field_name == "models" else field_name.upper())


def _parse_bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{name}: expected true/false (got {text!r})")


def _split_list(value: str | list[str] | tuple[str, ...]) -> list[str]:
    """A list value may come as repeated flags, or as one comma-separated string (env, sanic CLI)."""
    items = [value] if isinstance(value, str) else list(value)
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def _starts_model_entry(segment: str) -> bool:
    value = segment.split("=", 1)[-1]
    return "synthetic:" in segment or "/" in value or value.endswith(".gguf") or value in KNOWN_MODELS


def _split_models(value: str | list[str] | tuple[str, ...]) -> list[str]:
    """Repeated --model flags are taken whole; one comma-separated string (env, sanic CLI) is
    split, except that the `key=value` options of a synthetic spec stay with their entry."""
    if not isinstance(value, str):
        return [item.strip() for item in value if item.strip()]
    entries: list[str] = []
    for segment in (part.strip() for part in value.split(",")):
        if not segment:
            continue
        if entries and "synthetic:" in entries[-1] and not _starts_model_entry(segment):
            entries[-1] += "," + segment
        else:
            entries.append(segment)
    return entries


def convert(field_name: str, value: Any) -> Any:
    """One raw value (string or list of strings from argparse/env) → the field's type."""
    if field_name not in FIELDS:
        raise ConfigError(f"unknown setting {field_name!r}")
    default = FIELDS[field_name].default
    try:
        if field_name == "models":
            return tuple(parse_model_arg(item) for item in _split_models(value))
        if field_name == "cors_origins":
            return tuple(_split_list(value))
        if field_name == "lora":
            return tuple(parse_lora_arg(item) for item in _split_list(value))
        if field_name == "mmproj":
            return tuple(parse_mmproj_arg(item) for item in _split_list(value))
        if isinstance(value, str):
            if isinstance(default, bool):
                return _parse_bool(field_name, value)
            if isinstance(default, int):
                return int(value.strip())
            if isinstance(default, float):
                return float(value.strip())
            if field_name in ("records", "models_dir", "lora_dir"):
                return value or None
        return value
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{field_name}: cannot parse {value!r}") from None


def config_from_strings(values: Mapping[str, Any], base: GatewayConfig | None = None) -> GatewayConfig:
    """Later sources override earlier ones: pass env values as `base` fields, then flags."""
    converted = {name: convert(name, raw) for name, raw in values.items() if raw is not None}
    if base is None:
        return GatewayConfig(**converted)
    return dataclasses.replace(base, **converted)


def field_names() -> list[str]:
    return list(FIELDS)


__all__ = [
    "ConfigError",
    "DEFAULT_MODEL",
    "DEFAULT_URL",
    "GatewayConfig",
    "MODEL_NAME_RE",
    "LoraEntry",
    "ModelEntry",
    "config_from_strings",
    "convert",
    "default_text",
    "env_name",
    "field_names",
    "flag_name",
    "parse_model_arg",
]
