"""A laneserve started for the run: `laneserve serve` in its own process group on a free loopback
port, its log in a temp file (kept and named when it fails), stopped with SIGTERM to the group."""
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


class StartedServer:
    def __init__(self, serve_model: str, serve_args: str = "", startup_timeout_s: float = 300.0) -> None:
        self.port = free_port()
        self.cmd = [sys.executable, "-m", "gateway.cli", "serve", "--model", serve_model,
                    "--host", "127.0.0.1", "--port", str(self.port), "--log-format", "json",
                    *shlex.split(serve_args)]
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.log = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        # The child imports the same gateway/lanes packages as this process (a source checkout too).
        root = os.path.dirname(os.path.dirname(os.path.abspath(gateway.__file__)))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        self.log = tempfile.NamedTemporaryFile(prefix="laneserve_bench_", suffix=".log", delete=False)
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop(keep_log=True)
                raise RuntimeError(f"laneserve exited with {code} at start (log: {self.log.name})")
            if get_json(self.base_url + "/health/ready", 2.0) is not None:
                return
            time.sleep(0.2)
        self.stop(keep_log=True)
        raise RuntimeError(f"laneserve not ready after {self.startup_timeout_s:.0f} s (log: {self.log.name})")

    def stop(self, keep_log: bool = False) -> None:
        """SIGTERM to the group (gateway and lanes); SIGKILL what is left after a bounded wait."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(40)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.proc.wait(10)
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
        self.proc = None
        self.log.close()
        if not keep_log:
            os.unlink(self.log.name)
