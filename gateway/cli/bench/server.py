"""Servers started for a run (laneserve, or any command such as llama-server or a baseline): each
in its own process group on a free loopback port, its log in a temp file (kept and named when it
fails), stopped with SIGTERM to the group. Also used by benchmarks/ and the reliability tests'
benchmark helpers."""
from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import gateway


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout_s: float = 5.0, api_key: str | None = None) -> dict | None:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def first_model_id(base_url: str, api_key: str | None = None) -> str | None:
    """The first id of /v1/models (what vLLM bench uses when no model is given)."""
    body = get_json(base_url.rstrip("/") + "/v1/models", api_key=api_key)
    data = (body or {}).get("data") or []
    return data[0].get("id") if data else None


def http_status(url: str, timeout_s: float = 2.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


class ProcessServer:
    """`cmd` (listening on `port`) in its own process group, ready once `ready_path` answers 200;
    its output in a temp file, kept (and named in the error) when it fails to start."""

    def __init__(self, name: str, cmd: list[str], port: int, ready_path: str, env: dict | None = None,
                 startup_timeout_s: float = 300.0, cwd: str | None = None) -> None:
        self.name, self.cmd, self.port, self.ready_path = name, cmd, port, ready_path
        self.env, self.cwd, self.startup_timeout_s = env, cwd, startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.log = None
        self.returncode: int | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def log_path(self) -> str:
        return self.log.name

    def log_text(self) -> str:
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def log_tail(self, lines: int = 8) -> str:
        return f"log {self.log.name}: " + " | ".join(self.log_text().splitlines()[-lines:])

    def start(self) -> "ProcessServer":
        self.log = tempfile.NamedTemporaryFile(prefix=f"{self.name}_", suffix=".log", delete=False)
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=self.env, cwd=self.cwd, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code, tail = self.proc.returncode, self.log_tail()
                self.stop(keep_log=True)  # whatever it started in its group goes too
                raise RuntimeError(f"{self.name} exited with {code} at start; {tail}")
            if http_status(self.base_url + self.ready_path) == 200:
                return self
            time.sleep(0.2)
        tail = self.log_tail()
        self.stop(keep_log=True)
        raise RuntimeError(f"{self.name} not ready after {self.startup_timeout_s:.0f} s; {tail}")

    def stop(self, keep_log: bool = False) -> int | None:
        """SIGTERM to the group (e.g. the gateway and its lanes); SIGKILL what is left after a
        bounded wait. Returns the main process's exit status."""
        if self.proc is None:
            return self.returncode
        self.returncode = stop_process_group(self.proc)
        self.proc = None
        self.log.close()
        if not keep_log:
            os.unlink(self.log.name)
        return self.returncode


def stop_process_group(proc: subprocess.Popen) -> int:
    """SIGTERM to the group of a process started with start_new_session=True (a gateway and its
    lanes, or a balancer); SIGKILL what is left after a bounded wait. Returns its exit status."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(40)
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


def source_env() -> dict:
    """The environment for a child that must import the same gateway/lanes packages as this
    process (a source checkout too)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(gateway.__file__)))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}


class StartedServer(ProcessServer):
    """`laneserve serve --model serve_model` with JSON log lines, plus `serve_args`."""

    def __init__(self, serve_model: str, serve_args: str | list[str] = "", startup_timeout_s: float = 300.0,
                 cwd: str | None = None) -> None:
        port = free_port()
        extra = shlex.split(serve_args) if isinstance(serve_args, str) else list(serve_args)
        super().__init__("laneserve", [sys.executable, "-m", "gateway.cli", "serve", "--model", serve_model,
                                       "--host", "127.0.0.1", "--port", str(port), "--log-format", "json", *extra],
                         port, "/health/ready", env=source_env(), startup_timeout_s=startup_timeout_s, cwd=cwd)
