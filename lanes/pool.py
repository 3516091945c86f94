"""LanePool: the gateway-owned supervisor of all lane processes (one per model replica).

Lifecycle: `start()` (sync: every lane loaded and handshaken, else LaneStartupError with all
cleaned up) → `attach(loop)` (pump + death/hang watch on that loop) → `submit()` … →
`drain()` → `close()`. The pool lives in ONE process; every method after attach runs on that
loop's thread. Lanes are children of that process (they die with it: PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import asyncio
import atexit
import dataclasses
import logging
import time
from typing import Callable

from lanes import lane_stats, wire
from lanes.api import (LANE_STATES, SERVING_STATES, AdapterError, AdapterInfo, ChoiceDone, Chunk, Embedding,
                       Framing, GenerationParams, NumberedFraming, RepeatedFraming,
                       LaneBusy, LaneError, LaneModelSpec, LaneStartupError, LaneStatus, ScoredChunk)
from lanes.channels import request_ring_capacity, total_bytes
from lanes.config import PoolConfig, config_from_env
from lanes.pool_adapters import PoolAdapters
from lanes.names import ShmSpaceError, check_free_space, new_run_id, sweep_stale, unlink_run
from lanes.replica import LaneReplica
from lanes.stream import RequestStream

__all__ = ["LanePool", "LaneModelSpec", "Framing", "RepeatedFraming", "NumberedFraming", "GenerationParams", "Chunk", "ChoiceDone", "Embedding", "LaneBusy",
           "LaneError", "LaneStartupError", "LaneStatus", "RequestStream", "PoolConfig", "LANE_STATES",
           "SERVING_STATES", "ScoredChunk", "AdapterInfo", "AdapterError"]

log = logging.getLogger("laneserve.lanes")
HEALTH_PERIOD_S = 0.1
SHM_HEADROOM = 1.25  # rings of respawned lanes overlap briefly with the old ones' unlinked memory


class LanePool(PoolAdapters):
    def __init__(self, specs: list[LaneModelSpec], *, heartbeat_timeout_s: float | None = None,
                 config: PoolConfig | None = None, deferred: tuple[str, ...] = ()):
        if not specs:
            raise ValueError("LanePool needs at least one LaneModelSpec")
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate model names in {names}")
        overrides = {} if heartbeat_timeout_s is None else {"heartbeat_timeout_s": heartbeat_timeout_s}
        config = config_from_env(**overrides) if config is None else dataclasses.replace(config, **overrides)
        self.config = config
        self.specs = list(specs)
        # Models whose lanes start() leaves unspawned: lanes.residency loads and unloads them later.
        self.deferred = frozenset(deferred)
        if not self.deferred <= set(names):
            raise ValueError(f"deferred models {sorted(self.deferred - set(names))} have no LaneModelSpec")
        self.run_id = new_run_id()
        self.closing = False
        self._draining = False
        self._started = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._health_timer = None
        self._replicas: dict[str, list[LaneReplica]] = {
            spec.name: [LaneReplica(self, spec, mi, r) for r in range(spec.replicas)]
            for mi, spec in enumerate(self.specs)}
        self._next: dict[str, int] = {name: 0 for name in names}
        self._init_adapters(self.specs)
        # Called with a model name whenever a request ends or a replica becomes ready: the
        # gateway's admission queue then retries its head.
        self.on_capacity = None

    def _all_replicas(self) -> list[LaneReplica]:
        return [r for replicas in self._replicas.values() for r in replicas]

    def _startup_replicas(self) -> list[LaneReplica]:
        return [r for name, replicas in self._replicas.items() if name not in self.deferred for r in replicas]

    def replicas_of(self, model: str) -> list[LaneReplica]:
        return self._replicas[model]

    def capacity_changed(self, model: str) -> None:
        if self.on_capacity is not None:
            self.on_capacity(model)

    # --- startup ------------------------------------------------------------------------------
    def start(self, while_loading: Callable[[], None] | None = None) -> None:
        """Spawns every lane, runs while_loading() (the caller's own start-up work, overlapping the
        lanes' model loading), then waits until every lane is ready."""
        if self._started:
            raise RuntimeError("LanePool.start() called twice")
        self._started = True
        atexit.register(self.close)
        try:
            swept = sweep_stale(self.config.shm_dir)
            if swept:
                log.warning("removed %d stale shared-memory names of dead runs", len(swept))
            need = sum(total_bytes(request_ring_capacity(s.ctx_size, s.image_n_embd), self.config.output_ring_bytes) * s.replicas
                       for s in self.specs if s.name not in self.deferred)
            check_free_space(int(need * SHM_HEADROOM), self.config.shm_dir)
            for replica in self._startup_replicas():
                replica.spawn()
            if while_loading is not None:
                while_loading()
            self._wait_ready()
        except ShmSpaceError as e:
            self.close()
            raise LaneStartupError(str(e)) from None
        except LaneStartupError:
            self.close()
            raise
        except BaseException as e:
            self.close()
            raise LaneStartupError(f"lane startup failed: {e}") from e

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        pending = self._startup_replicas()
        failures = []
        while pending:
            still = []
            for replica in pending:
                result = replica.poll_startup()
                if result == "failed":
                    failures.append(f"lane {replica.name} could not load {replica.spec.path!r}: {replica.last_error}")
                elif result is None:
                    still.append(replica)
            if failures:
                break
            if still and time.monotonic() > deadline:
                failures += [f"lane {s.name} did not finish loading {s.spec.path!r} within "
                             f"{self.config.startup_timeout_s} s" for s in still]
                break
            pending = still
            if pending:
                time.sleep(0.005)
        if failures:
            raise LaneStartupError("; ".join(failures))

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._started or self.closing:
            raise RuntimeError("attach() needs a started, open pool")
        self._loop = loop
        for replica in self._all_replicas():
            replica.attach(loop)
        self._health_timer = loop.call_later(HEALTH_PERIOD_S, self._health_tick)

    def _health_tick(self) -> None:
        if self.closing:
            return
        now = time.monotonic_ns()
        for replica in self._all_replicas():
            replica.check_health(now)
        self._health_timer = self._loop.call_later(HEALTH_PERIOD_S, self._health_tick)

    # --- queries ------------------------------------------------------------------------------
    def model_names(self) -> list[str]:
        return [s.name for s in self.specs]

    def lane_info(self, model: str) -> dict:
        for replica in self._replicas[model]:
            if replica.hello is not None:
                h = replica.hello
                return {"n_ctx": h.n_ctx, "n_vocab": h.n_vocab, "num_slots": h.num_slots,
                        "kv_cache_bytes": h.kv_cache_bytes, "max_batch_tokens": h.max_batch_tokens,
                        "n_embd": h.n_embd}
        raise LaneError("no_lane", f"no lane of model {model!r} has completed its handshake")

    def statuses(self) -> list[LaneStatus]:
        return [LaneStatus(r.spec.name, r.index, r.state, r.pid, r.restarts, len(r.streams),
                           r.hello.num_slots if r.hello else 0, r.hello.kv_cache_bytes if r.hello else 0)
                for r in self._all_replicas()]

    def capacity(self, model: str) -> tuple[int, int]:
        """(requests in flight, slots) over the model's serving replicas."""
        in_flight = slots = 0
        for r in self._replicas[model]:
            if r.serving and r.hello is not None:
                in_flight += len(r.streams)
                slots += r.hello.num_slots
        return in_flight, slots

    def lane_stats(self) -> list[tuple[str, object]]:
        """(model, lanes.wire.Stats) per replica that has reported: its current process's latest STATS
        with the counters of its ended processes added (lanes.lane_stats.carry: never backwards)."""
        out = []
        for r in self._all_replicas():
            st = lane_stats.carry(r.retired_stats, r.stats)
            if st is not None:
                out.append((r.spec.name, st))
        return out

    # --- requests -----------------------------------------------------------------------------
    def submit(self, model: str, prompt_ids: list[int], params: GenerationParams, request_id: int, *,
               num_choices: int = 1, framings: list[Framing | RepeatedFraming | NumberedFraming] = (),
               collect: bool = False, keep_text: bool = False) -> RequestStream:
        """Start a request on the replica with the most free sequence slots; LaneBusy when every
        slot of the model is taken (the caller queues or answers 429). framings: one per (choice,
        channel) for streamed output; collect: non-stream;
        keep_text: a stream's content text also arrives (escaped) with each ChoiceDone."""
        self._check_open(model)
        if not 1 <= num_choices <= wire.MAX_CHOICES:
            raise ValueError(f"num_choices must be in [1, {wire.MAX_CHOICES}]")
        if not prompt_ids:
            raise ValueError("prompt_ids must be non-empty")
        known = {a.id for a in self._adapters[model].values()}
        unknown = [i for i, _ in params.lora if i not in known]
        if unknown:
            raise ValueError(f"model {model!r} has no LoRA adapter with id {unknown[0]}")
        best = self._pick_replica(model, request_id)
        payload = wire.encode_request(request_id, prompt_ids, params, num_choices)
        return self._send(model, best, request_id, payload, num_choices, list(framings), collect, keep_text)

    def submit_embeddings(self, model: str, inputs: list[list[int]], request_id: int) -> RequestStream:
        """Start an embedding request (each input, ≤ the lane's n_ctx tokens, its own prefill-only
        sequence; 1..wire.MAX_CHOICES inputs): the stream yields Embedding + ChoiceDone per input.
        Same replica choice and LaneBusy as submit()."""
        self._check_open(model)
        best = self._pick_replica(model, request_id)
        payload = wire.encode_embed_request(request_id, inputs)
        return self._send(model, best, request_id, payload, len(inputs), [], True)

    def submit_audio(self, model: str, job, framings: list[Framing | RepeatedFraming | NumberedFraming] = (),
                     collect: bool = False, keep_text: bool = False) -> RequestStream:
        """Start a transcription (a lanes.audio.records.AudioJob whose samples are already in
        its shared-memory segment) on an audio model's replica: the stream yields
        TranscriptPart items and one ChoiceDone; its text arrives as content deltas (framed or
        collected like a one-choice generation). Same replica choice and LaneBusy as submit()."""
        from lanes.audio.records import encode_audio_request

        self._check_open(model)
        best = self._pick_replica(model, job.request_id)
        return self._send(model, best, job.request_id, encode_audio_request(job), 1, list(framings), collect,
                          keep_text, wire.AUDIO_REQUEST)

    def _check_open(self, model: str) -> None:
        self._replicas[model]  # KeyError for an unknown model
        if self._loop is None:
            raise RuntimeError("submit() before attach()")
        if self._draining or self.closing:
            raise LaneBusy("the server is shutting down")

    def _pick_replica(self, model: str, request_id: int) -> LaneReplica:
        replicas = self._replicas[model]
        if not 0 < request_id < 2**64:
            raise ValueError("request_id must be in [1, 2^64)")
        if any(request_id in r.streams for r in replicas):
            raise ValueError(f"request id {request_id} is already in flight")
        start = self._next[model]
        best = None
        for k in range(len(replicas)):
            r = replicas[(start + k) % len(replicas)]
            if r.free_slots > 0 and (best is None or r.free_slots > best.free_slots):
                best = r
        if best is None:
            raise LaneBusy(f"every sequence slot of model {model!r} is taken (or its lanes are down)")
        return best

    def _send(self, model: str, best: LaneReplica, request_id: int, payload: bytes, num_choices: int,
              framings: list, collect: bool, keep_text: bool = False, record_type: int = wire.REQUEST) -> RequestStream:
        if len(payload) > best.channels.writer.max_payload_bytes:
            raise ValueError(f"request of {len(payload)} bytes exceeds the lane ring's maximum of "
                             f"{best.channels.writer.max_payload_bytes} (prompt longer than ctx_size?)")
        replicas = self._replicas[model]
        self._next[model] = (replicas.index(best) + 1) % len(replicas)
        return best.submit(request_id, payload, num_choices, framings, collect, keep_text, record_type)

    # --- shutdown -----------------------------------------------------------------------------
    async def drain(self, grace_s: float) -> None:
        """Stop admitting, let in-flight requests finish for grace_s, then end the rest with
        LaneError('shutdown') and cancel them on their lanes."""
        self._draining = True
        deadline = time.monotonic() + grace_s
        while any(r.streams for r in self._all_replicas()) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for replica in self._all_replicas():
            for rid in list(replica.streams):
                replica._send_cancel(rid)
            replica.fail_all("shutdown", "the server is shutting down")

    def close(self) -> None:
        """Shut every lane down (SHUTDOWN record → SIGTERM → SIGKILL), unlink all names. Idempotent."""
        if self.closing:
            return
        self.closing = True
        atexit.unregister(self.close)
        if self._health_timer is not None:
            self._health_timer.cancel()
        replicas = self._all_replicas()
        for r in replicas:
            r.cancel_timers()
            if r.proc is not None and r.proc.poll() is None and r.channels is not None:
                if r.hello is not None:
                    r.channels.writer.write(wire.SHUTDOWN, b"")
                else:  # still loading: it reads no ring yet; SIGTERM stops it after the load
                    r.proc.terminate()
        live = [r.proc for r in replicas if r.proc is not None]
        self._wait_exit(live, self.config.shutdown_grace_s)
        for sig_name in ("terminate", "kill"):
            left = [p for p in live if p.poll() is None]
            if not left:
                break
            log.warning("%d lane(s) still running after shutdown: %s", len(left), sig_name)
            for p in left:
                getattr(p, sig_name)()
            self._wait_exit(left, 1.0)
        for r in replicas:
            r.fail_all("shutdown", "the lane pool was closed")
            r.teardown()
        unlink_run(self.run_id, self.config.shm_dir)  # backstop for anything half-created

    @staticmethod
    def _wait_exit(procs, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for p in procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except Exception:
                pass
