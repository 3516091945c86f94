"""LaneSlot: one model replica as seen by the pool — its process, rings, state and restarts.

States: starting → ready ⇄ busy; on death: restarting (capped exponential backoff) → starting,
or failed after `max_load_failures` consecutive failed loads; stopped after close.
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
import threading
import time

import posix_ipc

from lanes import wire
from lanes.api import ChoiceDone, LaneBusy, LaneError
from lanes.channels import LaneChannels, request_ring_capacity
from lanes.stream import RequestStream

log = logging.getLogger("laneserve.lanes")

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


class LaneSlot:
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
        self.stream: RequestStream | None = None
        self.current_rid: int | None = None
        self.load_failures = 0
        self.backoff_s = pool.config.backoff_initial_s
        self.spawn_ns = 0
        self.ready_ns = 0
        self.kill_reason: str | None = None
        self.last_error = ""
        self._loop = None
        self._respawn_timer = None
        self._drain_scheduled = False
        self._waiter: threading.Thread | None = None
        self._waiter_stop: threading.Event | None = None

    # --- process lifecycle ------------------------------------------------------------
    def spawn(self) -> None:
        cfg = self.pool.config
        self.generation += 1
        self.channels = LaneChannels.create(
            self.pool.run_id, f"{self.label}g{self.generation}", request_ring_capacity(self.spec.ctx_size),
            cfg.output_ring_bytes, cfg.doorbell)
        lane_config = {
            "parent_pid": os.getpid(), "path": self.spec.path, "threads": self.spec.threads,
            "ctx_size": self.spec.ctx_size,
            "channels": self.channels.lane_spec(), "max_pending_bytes": cfg.max_pending_bytes,
            "prefill_budget_ns_per_token": cfg.prefill_budget_ns_per_token,
        }
        env = dict(os.environ)
        env["PYTHONPATH"] = _PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        fds = (self.channels.bell_fd,) if self.channels.bell_fd >= 0 else ()
        try:
            # exec'd fresh interpreter (spawn semantics: no fork-inherited threads or locks);
            # own process group so terminal SIGINT goes to the gateway only.
            self.proc = subprocess.Popen(
                # -P: never let the current directory shadow the installed lanes package.
                [sys.executable, "-P", "-m", "lanes.lane_process", json.dumps(lane_config)],
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
        self.kill_reason = None
        self.last_error = ""
        if self._loop is not None:
            self._register()

    def poll_startup(self) -> str | None:
        """Synchronous handshake step (before attach): 'ready', 'failed' or None (still loading)."""
        self.dispatch(self.channels.reader.read_batch(READ_BATCH_RECORDS))
        if self.hello is not None:
            return "ready"
        if self.proc.poll() is not None:
            self.dispatch(self.channels.reader.read_batch(1 << 20))
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
            self._waiter_stop = threading.Event()
            self._waiter = threading.Thread(
                target=self._semaphore_waiter, args=(self.channels.bell_sem, self._waiter_stop, loop),
                name=f"lane-bell-{self.name}", daemon=True)
            self._waiter.start()
        self._schedule_drain()

    def _unregister(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            if self.pidfd >= 0:
                loop.remove_reader(self.pidfd)
            if self.channels is not None and self.channels.bell_fd >= 0:
                loop.remove_reader(self.channels.bell_fd)
        if self._waiter is not None:
            self._waiter_stop.set()
            self._waiter.join(1.0)  # acquire() times out every 100 ms
            self._waiter = None

    def _semaphore_waiter(self, sem, stop: threading.Event, loop) -> None:
        while not stop.is_set():
            try:
                sem.acquire(0.1)  # releases the GIL
            except (posix_ipc.BusyError, posix_ipc.SignalError):
                continue
            if not self._drain_scheduled and not stop.is_set():
                try:
                    loop.call_soon_threadsafe(self._schedule_drain)
                except RuntimeError:  # loop closed
                    return

    def _on_eventfd(self) -> None:
        self._drain(self.channels.bell_fd)

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self._loop.call_soon(self._drain)

    def _drain(self, bell_fd: int = -1) -> None:
        """The gateway's ring pump for this lane. Phases: 1 (direct) a streaming request whose
        socket is free gets its deltas sent natively, ring → socket, and only a control record
        comes back; 2 (queued) otherwise records are copied out and dispatched to the stream;
        3 re-arm the doorbell, or come back soon when records may be waiting."""
        self._drain_scheduled = False
        ch = self.channels
        if ch is None:
            return
        stream = self.stream
        if stream is not None and stream.direct_ready:
            sink = stream.sink
            num_deltas, send_errno, unsent, control, more = ch.reader.relay(
                sink.fd, self.current_rid, READ_BATCH_RECORDS, bell_fd)
            try:
                if num_deltas or send_errno:
                    sink.relayed(num_deltas, unsent, send_errno)
            finally:  # a failing sink must not lose the consumed control record or the wake-up
                if control is not None:
                    self.dispatch((control,))
                if more and self.channels is ch:
                    self._schedule_drain()
            return
        if bell_fd >= 0:
            try:
                os.read(bell_fd, 8)
            except BlockingIOError:
                pass
        records = ch.reader.read_batch(READ_BATCH_RECORDS)
        self.dispatch(records)
        # Bounded chunks keep the loop responsive; arm() == True means data raced in.
        if self.channels is ch and (len(records) == READ_BATCH_RECORDS or ch.reader.arm()):
            self._schedule_drain()

    # --- records --------------------------------------------------------------------------
    def dispatch(self, records) -> None:
        for rtype, payload in records:
            if rtype == wire.DELTA:
                rid, choice, _, _ = wire.decode_delta_header(payload)
                if rid == self.current_rid and self.stream is not None:
                    self.stream.push_chunk(choice, payload[wire.DELTA_HEADER_BYTES:])
            elif rtype == wire.DONE:
                rid, choice, reason, pt, ct, pre, dec, flags, _ = wire.decode_done(payload)
                if rid != self.current_rid:
                    continue
                last = bool(flags & wire.DONE_LAST_CHOICE)
                if self.stream is not None:
                    self.stream.push_done(
                        ChoiceDone(choice, wire.FINISH_NAMES.get(reason, "stop"), pt, ct, pre, dec), last)
                if last:
                    self._request_over()
            elif rtype == wire.ERROR:
                rid, code, message = wire.decode_error(payload)
                if rid == 0:
                    self.last_error = message
                    log.warning("lane %s (pid %s): %s: %s", self.name, self.pid, code, message)
                elif rid == self.current_rid:
                    if self.stream is not None:
                        self.stream.fail(LaneError(code, message))
                    self._request_over()
            elif rtype == wire.HELLO:
                self.hello = wire.decode_hello(payload)
                self.load_failures = 0  # the limit counts consecutive failed loads
                self.state = "ready"
                self.ready_ns = time.monotonic_ns()

    def _request_over(self) -> None:
        self.stream = None
        self.current_rid = None
        if self.state == "busy":
            self.state = "ready"

    # --- requests --------------------------------------------------------------------------
    def submit(self, request_id: int, payload: bytes, num_choices: int) -> RequestStream:
        if not self.channels.writer.write(wire.REQUEST, payload):
            raise LaneBusy(f"lane {self.name} request ring is full")
        self.stream = RequestStream(request_id, num_choices, self._send_cancel)
        self.current_rid = request_id
        self.state = "busy"
        return self.stream

    def _send_cancel(self, request_id: int) -> None:
        if self.current_rid != request_id or self.channels is None:
            return
        if not self.channels.writer.write(wire.CANCEL, wire.encode_cancel(request_id)):
            self._loop.call_later(0.001, self._send_cancel, request_id)

    def fail_current(self, code: str, message: str) -> None:
        if self.stream is not None:
            self.stream.fail(LaneError(code, message))
        self.stream = None

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
        if self.channels is not None:
            self.dispatch(self.channels.reader.read_batch(1 << 20))
        how = f"lane {self.name} (pid {self.pid}) {describe_exit(rc)}"
        if self.current_rid is not None:
            code = self.kill_reason if self.kill_reason == "lane_hung" else "lane_died"
            self.fail_current(code, how + " during the request")
            self._request_over()
        was_ready = self.hello is not None
        self.teardown()
        if self.pool.closing:
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

    def cancel_timers(self) -> None:
        if self._respawn_timer is not None:
            self._respawn_timer.cancel()
            self._respawn_timer = None
