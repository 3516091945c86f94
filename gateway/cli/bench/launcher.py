"""The one launcher of server processes for `laneserve bench`, benchmarks/ and the tests
(tests/gateway/conftest.py, tests/reliability, tests/deploy): `laneserve serve` (start_laneserve)
or any command (start: llama-server, a baseline, a load balancer) on a loopback port, in its own
session (so its process group is its pid: a failing Sanic manager kills its group, never the
caller's), its output in a log file; a bounded wait for readiness that names the log's tail when
the process exits or never gets ready; stopped by the pid, or the process group, of the process it
started and of nothing else."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

import gateway

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 40.0
TAIL_CHARS = 4000

# Loopback only: never through a proxy named in the environment.
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def source_env(env: dict | None = None) -> dict:
    """This process's environment for a child that must import the same gateway/lanes packages
    (installed, or a source checkout: its root goes first on PYTHONPATH), plus `env`."""
    root = str(Path(gateway.__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **(env or {})}


def serve_command(port: int, *args: str) -> list[str]:
    """`laneserve serve` on 127.0.0.1:`port` with `args`, run by this Python."""
    return [sys.executable, "-m", "gateway.cli", "serve", "--host", "127.0.0.1", "--port", str(port), *args]


def http_get(url: str, timeout_s: float = 2.0) -> tuple[int | None, bytes]:
    """(status, body) of GET `url`; (None, b"") when nothing answers."""
    try:
        with _LOOPBACK.open(url, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (urllib.error.URLError, OSError):
        return None, b""


def stop_process_group(proc: subprocess.Popen, wait_s: float = STOP_TIMEOUT_S) -> int:
    """SIGTERM to the group of a process started in its own session (a gateway and its lanes, or
    a balancer); SIGKILL to what is left after a bounded wait. Returns the process's exit status."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        os.killpg(pgid, signal.SIGKILL)
        proc.wait(10)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # lanes may outlive the gateway for a moment
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.returncode


class Launched:
    """A process started by `start`: `proc` (its own session; None in a subclass that has not
    started it yet), listening on `port`, output in `log_path`; `records_path` when
    start_laneserve asked for request records."""

    def __init__(self, proc: subprocess.Popen | None, port: int, log_path: Path | None, name: str = "server",
                 records_path: Path | None = None) -> None:
        self.proc, self.port, self.log_path, self.name = proc, port, log_path, name
        self.records_path = records_path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def log_tail(self, chars: int = TAIL_CHARS) -> str:
        return f"log {self.log_path}:\n{self.log_text()[-chars:]}"

    def records(self, *request_ids: str, timeout_s: float = 5.0) -> list[dict]:
        """The request records written so far. With request ids: waits (up to `timeout_s`) until
        each has one, since a record is written as its handler ends, which may be after the
        client has read the whole response; returns only theirs, in file order."""
        deadline = time.monotonic() + timeout_s
        while True:
            lines = self.records_path.read_text().splitlines() if self.records_path.exists() else []
            found = [json.loads(line) for line in lines if line.strip()]
            if not request_ids:
                return found
            found = [r for r in found if r.get("request_id") in request_ids]
            if {r["request_id"] for r in found} >= set(request_ids) or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def wait_until(self, ready: Callable[[], bool], timeout_s: float = READY_TIMEOUT_S, poll_s: float = 0.2) -> None:
        """Polls `ready()` (an exception counts as not ready) until it is true. When the process
        exits first, or `timeout_s` passes, stops its group and raises RuntimeError with the log's tail."""
        deadline = time.monotonic() + timeout_s
        last_error = ""
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop_group(wait_s=10)  # whatever it started in its group goes too
                raise RuntimeError(f"{self.name} exited with {code} at start; {self.log_tail()}")
            try:
                if ready():
                    return
            except Exception as exc:  # noqa: BLE001  (not ready yet, whatever the probe met)
                last_error = f" (last probe: {type(exc).__name__}: {exc})"
            if time.monotonic() > deadline:
                self.stop_group(wait_s=10)
                raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f} s{last_error}; {self.log_tail()}")
            time.sleep(poll_s)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S, path: str = "/health/ready", poll_s: float = 0.2,
                   check: Callable[[bytes], bool] | None = None) -> None:
        """Until GET `path` answers 200 (and `check(body)` holds, when given); see wait_until."""
        def ready() -> bool:
            status, body = http_get(self.base_url + path)
            return status == 200 and (check is None or check(body))

        self.wait_until(ready, timeout_s, poll_s)

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM to the process (not its group) and its exit status; SIGKILL and RuntimeError
        (with the log's tail) when it has not exited within `timeout_s`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise RuntimeError(f"{self.name} did not stop within {timeout_s} s; {self.log_tail()}") from None
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL to the process (not its group), if it still runs."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop_group(self, wait_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM to its process group, SIGKILL to what is left after `wait_s`; its exit status."""
        return stop_process_group(self.proc, wait_s)


def start(command: list[str], port: int, *, name: str = "server", log_path: Path | str | None = None,
          env: dict | None = None, cwd: Path | str | None = None, records_path: Path | None = None) -> Launched:
    """`command` (which listens on `port`) in its own session, stdout and stderr to `log_path` (a
    new temp file when None); `env` None inherits this environment. Returns at once: see wait_ready."""
    if log_path is None:
        fd, log_path = tempfile.mkstemp(prefix=f"{name}_", suffix=".log")
        os.close(fd)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, start_new_session=True)
    return Launched(proc, port, Path(log_path), name, records_path)


def start_laneserve(*args: str, command: list[str] | None = None, port: int | None = None,
                    log_path: Path | str | None = None, records_path: Path | None = None, env: dict | None = None,
                    cwd: Path | str | None = None, name: str = "laneserve") -> Launched:
    """`laneserve serve ARGS` on a free loopback port (or `command` + ARGS, with "{port}" in it
    replaced by the port), importing the same gateway/lanes as this process (source_env, plus
    `env`); `records_path` adds `--records PATH` (before ARGS). Returns at once: see wait_ready."""
    port = free_port() if port is None else port
    if command is None:
        command = serve_command(port, *(["--records", str(records_path)] if records_path else []))
    else:
        command = [part.replace("{port}", str(port)) for part in command]
    return start(command + list(args), port, name=name, log_path=log_path, env=source_env(env), cwd=cwd,
                 records_path=records_path)
