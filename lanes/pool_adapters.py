"""PoolAdapters: the LoRA adapters of a LanePool's models (a LanePool base: it reads the pool's
replicas, loop and `_check_open`). Ids are pool-wide and never reused, so a lane never confuses two
files (csrc/ring/wire.h LOAD_ADAPTER). A spec's adapters are in the table from the start; every
(re)spawned lane loads the table's adapters before its HELLO."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os

from lanes import wire
from lanes.api import AdapterError, AdapterInfo

log = logging.getLogger("laneserve.lanes")
ADAPTER_LOAD_TIMEOUT_S = 120.0  # every lane of the model maps and checks the file


class PoolAdapters:
    def _init_adapters(self, specs) -> None:
        names = [spec.name for spec in specs]
        self._adapters: dict[str, dict[str, AdapterInfo]] = {name: {} for name in names}  # model → name → info
        self._next_adapter_id = 1
        # Loads in progress: adapter id → (future, replicas that have not answered yet).
        self._adapter_waits: dict[int, tuple[asyncio.Future, set]] = {}
        # model → adapter name → why it failed to load (spec adapters: the lane refused the file).
        self.adapter_errors: dict[str, dict[str, str]] = {name: {} for name in names}
        for spec in specs:
            for name, path in spec.lora:
                self._new_adapter(spec.name, name, path)

    def adapters(self, model: str) -> list[AdapterInfo]:
        """The model's loaded LoRA adapters, by id: GenerationParams.lora names them by id."""
        return sorted(self._adapters[model].values(), key=lambda a: a.id)

    def _new_adapter(self, model: str, name: str, path: str) -> AdapterInfo:
        info = AdapterInfo(self._next_adapter_id, name, str(path))
        self._next_adapter_id += 1
        self._adapters[model][name] = info
        self.adapter_errors[model].pop(name, None)
        return info

    async def load_adapter(self, model: str, name: str, path: str) -> AdapterInfo:
        """Load a GGUF LoRA adapter on every lane of the model under `name`. Returns once every
        running lane has it (lanes down or restarting get it when they respawn); raises
        AdapterError naming the problem (name taken, no such file, the lane refused the file —
        then no lane keeps it), KeyError for an unknown model."""
        self._check_open(model)
        if not name:
            raise AdapterError("a LoRA adapter needs a non-empty name")
        if name in self._adapters[model]:
            raise AdapterError(f"model {model!r} already has a LoRA adapter named {name!r}")
        if not os.path.isfile(path):
            raise AdapterError(f"LoRA adapter {name!r}: no file at {path!r}")
        info = self._new_adapter(model, name, path)
        targets = {r for r in self._replicas[model] if r.channels is not None}
        future = self._loop.create_future()
        if not targets:
            future.set_result(info)
        self._adapter_waits[info.id] = (future, targets)
        payload = wire.encode_load_adapter(info.id, name, str(path))
        for replica in targets:
            replica.send_control(wire.LOAD_ADAPTER, payload)
        try:
            await asyncio.wait_for(asyncio.shield(future), ADAPTER_LOAD_TIMEOUT_S)
        except asyncio.TimeoutError:
            self._drop_adapter(model, name)
            raise AdapterError(f"LoRA adapter {name!r}: the lanes did not load it within {ADAPTER_LOAD_TIMEOUT_S} s")
        finally:
            self._adapter_waits.pop(info.id, None)
        return self._adapters[model].get(name, info)

    def unload_adapter(self, model: str, name: str) -> None:
        """Unload an adapter at once: new requests can no longer name it; requests already
        running keep it until they end (the lanes count references). AdapterError if unknown."""
        if name not in self._adapters[model]:
            raise AdapterError(f"model {model!r} has no LoRA adapter named {name!r}")
        self._drop_adapter(model, name)

    def _drop_adapter(self, model: str, name: str, refused_by=None) -> None:
        info = self._adapters[model].pop(name, None)
        if info is None:
            return
        payload = wire.encode_unload_adapter(info.id)
        for replica in self._replicas[model]:
            if replica.channels is not None and replica is not refused_by:
                replica.send_control(wire.UNLOAD_ADAPTER, payload)

    def adapter_status(self, replica, adapter_id: int, status: str, tensor_bytes: int, load_ns: int,
                       message: str) -> None:
        """An ADAPTER record from a lane (lanes.replica dispatch)."""
        model = replica.spec.name
        info = next((a for a in self._adapters[model].values() if a.id == adapter_id), None)
        wait = self._adapter_waits.get(adapter_id)
        if status == "loaded":
            if info is not None and tensor_bytes:
                self._adapters[model][info.name] = dataclasses.replace(info, tensor_bytes=tensor_bytes)
            if wait is not None:
                wait[1].discard(replica)
                if not wait[1] and not wait[0].done():
                    wait[0].set_result(None)
        elif status == "failed":
            log.warning("lane %s: %s", replica.name, message)
            if info is not None:
                self.adapter_errors[model][info.name] = message
                self._drop_adapter(model, info.name, replica)  # no lane keeps half a set
            if wait is not None and not wait[0].done():
                wait[0].set_exception(AdapterError(message))

    def replica_gone(self, replica: LaneReplica) -> None:
        """A lane died: loads waiting for its answer stop waiting (it reloads the table on respawn)."""
        for future, pending in self._adapter_waits.values():
            pending.discard(replica)
            if not pending and not future.done():
                future.set_result(None)
