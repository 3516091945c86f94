"""LaneReplica: one model replica as seen by the pool — its process, rings, state, restarts and
the requests in flight on it (up to its sequence slots; the lane batches them).

States (lanes.api.LANE_STATES): starting → ready ⇄ busy (serving ≥ 1 request); on death:
restarting (capped exponential backoff) → starting, or failed after `max_load_failures`
consecutive failed loads; stopped after close.
Death is seen through a pidfd on the event loop (~1 ms after SIGKILL); hangs through the
output ring's heartbeat word. All callbacks run on the pool's event loop thread.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

from lanes import lane_records, lane_stats, wire
from lanes.api import LaneBusy, LaneError, SERVING_STATES
from lanes.channels import LaneChannels, request_ring_capacity
from lanes.doorbell import SemaphoreWaiter
from lanes.stream import RequestStream

log = logging.getLogger("laneserve.lanes")

LANE_MODULES = {"text": "lanes.lane_process", "audio": "lanes.audio.lane_process"}  # by LaneModelSpec.kind
READ_BATCH_RECORDS = 128  # records per pump callback before yielding to the loop
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "is gone"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


class LaneReplica:
    def __init__(self, pool, spec, model_index: int, index: int):
        self.pool = pool
        self.spec = spec
        self.index = index
        self.label = f"m{model_index}r{index}"
        self.name = f"{spec.name}[{index}]"
        self.state = "stopped"
        self.pid: int | None = None
        self.restarts = 0
        self.generation = 0
        self.channels: LaneChannels | None = None
        self.proc: subprocess.Popen | None = None
        self.pidfd = -1
        self.hello: wire.Hello | None = None
        self.stats: wire.Stats | None = None       # latest STATS record of the current process
        self.retired_stats: wire.Stats | None = None  # counters of its ended processes (lanes.lane_stats)
        self.streams: dict[int, RequestStream] = {}  # requests in flight, by lane request id
        self.load_failures = 0
        self.backoff_s = pool.config.backoff_initial_s
        self.spawn_ns = 0
        self.ready_ns = 0
        self.kill_reason: str | None = None
        self.last_error = ""
        self.unloading = False  # lanes.residency stops it on purpose: its exit is no crash (no respawn)
        self._loop = None
        self._respawn_timer = None
        self._drain_scheduled = False
        self._waiter: SemaphoreWaiter | None = None

    # --- process lifecycle ------------------------------------------------------------
    def spawn(self) -> None:
        cfg = self.pool.config
        self.generation += 1
        self.channels = LaneChannels.create(
            self.pool.run_id, f"{self.label}g{self.generation}", request_ring_capacity(self.spec.ctx_size, self.spec.image_n_embd),
            cfg.output_ring_bytes, cfg.doorbell)
        lane_config = {
            "parent_pid": os.getpid(), "path": self.spec.path, "threads": self.spec.threads,
            "ctx_size": self.spec.ctx_size, "num_slots": self.spec.num_slots,
            "max_batch_tokens": self.spec.max_batch_tokens, "repack_cache_dir": self.spec.repack_cache_dir,
            **{k: getattr(self.spec, k) for k in ("prompt_cache_mib", "kv_cache_mib", "prefix_cache_dir",
                                                  "prefix_cache_disk_mib")},
            "channels": self.channels.lane_spec(), "max_pending_bytes": cfg.max_pending_bytes,
            "prefill_budget_ns_per_token": cfg.prefill_budget_ns_per_token,
            # The pool's current LoRA adapters: a respawned lane comes back with the same set.
            "adapters": [[a.id, a.name, a.path] for a in self.pool.adapters(self.spec.name)],
        }
        env = dict(os.environ)
        env["PYTHONPATH"] = _PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        fds = (self.channels.bell_fd,) if self.channels.bell_fd >= 0 else ()
        try:
            # exec'd fresh interpreter (spawn semantics: no fork-inherited threads or locks);
            # own process group so terminal SIGINT goes to the gateway only.
            self.proc = subprocess.Popen(
                # -P: never let the current directory shadow the installed lanes package.
                [sys.executable, "-P", "-m", LANE_MODULES[self.spec.kind], json.dumps(lane_config)],
                pass_fds=fds, process_group=0, stdin=subprocess.DEVNULL, env=env)
            self.pidfd = os.pidfd_open(self.proc.pid)
        except BaseException:
            if self.proc is not None:
                self.proc.kill()
                self.proc.wait()
                self.proc = None
            self.channels.close()
            self.channels = None
            raise
        self.pid = self.proc.pid
        self.state = "starting"
        self.spawn_ns = time.monotonic_ns()
        self.hello = None
        self.stats = None
        self.kill_reason = None
        self.last_error = ""
        if self._loop is not None:
            self._register()

    def poll_startup(self) -> str | None:
        """Synchronous handshake step (before attach): 'ready', 'failed' or None (still loading)."""
        self.pump_all()
        if self.hello is not None:
            return "ready"
        if self.proc.poll() is not None:
            self.pump_all()
            if self.hello is None:
                if not self.last_error:
                    self.last_error = f"lane process {describe_exit(self.proc.returncode)} before its handshake"
                return "failed"
        return None

    def kill(self, reason: str) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill_reason = reason
            self.proc.send_signal(signal.SIGKILL)  # our own child, by pid

    # --- event-loop wiring --------------------------------------------------------------
    def attach(self, loop) -> None:
        self._loop = loop
        if self.channels is not None:
            self._register()

    def _register(self) -> None:
        loop = self._loop
        loop.add_reader(self.pidfd, self._on_pidfd)
        if self.channels.doorbell == "eventfd":
            loop.add_reader(self.channels.bell_fd, self._on_eventfd)
        else:
            self._waiter = SemaphoreWaiter(self.channels.bell_sem, loop, self._schedule_drain,
                                           lambda: self._drain_scheduled, f"lane-bell-{self.name}")
        self._schedule_drain()

    def _unregister(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            if self.pidfd >= 0:
                loop.remove_reader(self.pidfd)
            if self.channels is not None and self.channels.bell_fd >= 0:
                loop.remove_reader(self.channels.bell_fd)
        if self._waiter is not None:
            self._waiter.stop()
            self._waiter = None

    def _on_eventfd(self) -> None:
        self._drain(self.channels.bell_fd)

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self._loop.call_soon(self._drain)

    def _drain(self, bell_fd: int = -1) -> None:
        """The gateway's ring pump for this lane. Phases: 1 one native pump call: deltas of
        requests in direct mode go ring → socket, others come back framed (queued) or accumulate
        natively (collect); it stops at the first control record; 2 queued chunks and unsent
        direct tails go to their streams; 3 the control record (DONE/ERROR/STATS/HELLO) is
        dispatched after every delta before it; 4 come back soon when records may be waiting
        (otherwise the native call re-armed the doorbell)."""
        self._drain_scheduled = False
        ch = self.channels
        if ch is None:
            return
        more = True  # if a stream's callback raises, come back rather than wedge the lane
        try:
            more = self._pump_once(ch, bell_fd)
        finally:
            if more and self.channels is ch:
                self._schedule_drain()

    def _pump_once(self, ch, bell_fd: int = -1) -> bool:
        queued, partial, control, more = ch.reader.pump(READ_BATCH_RECORDS, bell_fd)
        streams = self.streams
        try:
            if queued is not None:
                for rid, choice, data in queued:
                    stream = streams.get(rid)
                    if stream is not None:
                        stream.push_chunk(choice, data)
            if partial is not None:
                for rid, unsent, send_errno in partial:
                    stream = streams.get(rid)
                    if stream is not None:
                        stream.push_partial(unsent, send_errno)
        finally:  # a failing sink must not lose the consumed control record or the wake-up
            if control is not None:
                self.dispatch(control)
        return more

    def pump_all(self, max_rounds: int = 1 << 16) -> None:
        """Everything in the ring now (handshake, exit): bounded so a live writer cannot pin us."""
        ch = self.channels
        for _ in range(max_rounds):
            if ch is None or not self._pump_once(ch):
                return

    # --- records --------------------------------------------------------------------------
    def dispatch(self, record) -> None:
        rtype, payload = record
        handler = lane_records.HANDLERS.get(rtype)
        if handler is not None:
            handler(self, payload)

    def request_over(self, rid: int) -> None:
        """The request's last record arrived (or it failed): its slot is free again."""
        self.streams.pop(rid, None)
        if self.channels is not None:
            self.channels.reader.remove_route(rid)
        if not self.streams and self.state == "busy":
            self.state = "ready"
        self.pool.capacity_changed(self.spec.name)

    # --- requests --------------------------------------------------------------------------
    @property
    def serving(self) -> bool:
        return self.state in SERVING_STATES

    @property
    def free_slots(self) -> int:
        return self.hello.num_slots - len(self.streams) if self.serving and self.hello is not None else 0

    def submit(self, request_id: int, payload: bytes, num_choices: int, framings, collect: bool,
               keep_text: bool = False, record_type: int = wire.REQUEST) -> RequestStream:
        """framings: [(choice, channel, prefix, suffix)] for streamed output; collect: the text of
        each choice accumulates natively and arrives with its ChoiceDone."""
        reader = self.channels.reader
        reader.add_route(request_id, num_choices, framings, collect, keep_text)
        if not self.channels.writer.write(record_type, payload):
            reader.remove_route(request_id)
            raise LaneBusy(f"lane {self.name} request ring is full")
        stream = RequestStream(request_id, num_choices, reader, self._send_cancel)
        self.streams[request_id] = stream
        self.state = "busy"
        return stream

    def send_control(self, record_type: int, payload: bytes) -> None:
        """A control record (LOAD_ADAPTER, UNLOAD_ADAPTER) to this lane, retried while its ring is full."""
        if self.channels is None:
            return
        if not self.channels.writer.write(record_type, payload):
            self._loop.call_later(0.001, self.send_control, record_type, payload)

    def _send_cancel(self, request_id: int) -> None:
        if request_id not in self.streams or self.channels is None:
            return
        if not self.channels.writer.write(wire.CANCEL, wire.encode_cancel(request_id)):
            self._loop.call_later(0.001, self._send_cancel, request_id)

    def fail_all(self, code: str, message: str) -> None:
        """Every request in flight ends with LaneError(code) (lane death, shutdown)."""
        streams, self.streams = self.streams, {}
        for rid, stream in streams.items():
            stream.next_number()  # the relay's event count, read while the route exists
            if self.channels is not None:
                self.channels.reader.remove_route(rid)  # the pump must never touch its socket again
            stream.fail(LaneError(code, message))
        if self.state == "busy":
            self.state = "ready"
        if streams:
            self.pool.capacity_changed(self.spec.name)

    # --- health and death ---------------------------------------------------------------
    def check_health(self, now_ns: int) -> None:
        cfg = self.pool.config
        if self.state in ("ready", "busy") and self.channels is not None:
            r = self.channels.reader
            last = max(r.heartbeat_ns, r.quiet_until_ns, self.ready_ns)
            if now_ns - last > cfg.heartbeat_timeout_s * 1e9:
                log.error("lane %s (pid %s) missed its heartbeat for %.1f s: killing it",
                          self.name, self.pid, (now_ns - last) / 1e9)
                self.kill("lane_hung")
        elif self.state == "starting" and now_ns - self.spawn_ns > cfg.startup_timeout_s * 1e9:
            self.last_error = f"no handshake within {cfg.startup_timeout_s} s"
            self.kill("startup_timeout")

    def _on_pidfd(self) -> None:
        self._loop.remove_reader(self.pidfd)
        self.handle_exit()

    def handle_exit(self) -> None:
        """The process is gone (pidfd readable): deliver what it wrote, fail the rest, restart."""
        rc = self.proc.wait()
        self.pump_all()
        how = f"lane {self.name} (pid {self.pid}) {describe_exit(rc)}"
        if self.kill_reason == "lane_hung":  # our SIGKILL: what the client should hear is why
            how = (f"lane {self.name} (pid {self.pid}) stopped answering for "
                   f"{self.pool.config.heartbeat_timeout_s:g} s and was replaced")
        if self.streams:
            code = self.kill_reason if self.kill_reason == "lane_hung" else "lane_died"
            self.fail_all(code, how + " during the request")
        was_ready = self.hello is not None
        self.teardown()
        self.pool.replica_gone(self)
        if self.pool.closing or self.unloading:
            self.unloading = False
            return
        if not was_ready:
            self.load_failures += 1
            log.error("%s before its handshake (%d/%d): %s", how, self.load_failures,
                      self.pool.config.max_load_failures, self.last_error)
            if self.load_failures >= self.pool.config.max_load_failures:
                self.state = "failed"
                return
        else:
            log.error("%s; restarting", how)
            if time.monotonic_ns() - self.ready_ns > self.pool.config.stable_after_s * 1e9:
                self.backoff_s = self.pool.config.backoff_initial_s
        self.state = "restarting"
        delay = self.backoff_s
        self.backoff_s = min(self.backoff_s * 2, self.pool.config.backoff_max_s)
        self._respawn_timer = self._loop.call_later(delay, self._respawn)

    def _respawn(self) -> None:
        self._respawn_timer = None
        if self.pool.closing or self.state != "restarting":
            return
        self.restarts += 1
        try:
            self.spawn()
        except Exception as e:  # e.g. /dev/shm full: count as a failed load, back off
            log.exception("respawning lane %s failed", self.name)
            self.last_error = str(e)
            self.load_failures += 1
            if self.load_failures >= self.pool.config.max_load_failures:
                self.state = "failed"
                return
            self._respawn_timer = self._loop.call_later(self.backoff_s, self._respawn)
            self.backoff_s = min(self.backoff_s * 2, self.pool.config.backoff_max_s)

    def teardown(self) -> None:
        """Stop watching, unmap and unlink this generation's IPC; the process must be gone."""
        self._unregister()
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        if self.channels is not None:
            self.channels.close()
            self.channels = None
        self.proc = None
        self.pid = None
        self.state = "stopped"
        self.retired_stats = lane_stats.retire(self.retired_stats, self.stats)
        self.stats = None

    def cancel_timers(self) -> None:
        if self._respawn_timer is not None:
            self._respawn_timer.cancel()
            self._respawn_timer = None
