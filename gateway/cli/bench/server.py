"""Servers started for a run (laneserve, or any command such as llama-server or a baseline), with
the launcher (gateway.cli.bench.launcher): each in its own process group on a free loopback port,
its log in a temp file (kept and named when it fails), stopped with SIGTERM to the group. Also
used by benchmarks/."""
from __future__ import annotations

import json
import shlex
import urllib.error
import urllib.request

from gateway.cli.bench import launcher


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


class ProcessServer(launcher.Launched):
    """`cmd` (listening on `port`), started by .start() with the launcher and ready once
    `ready_path` answers 200; its output in a temp file, removed by .stop() unless kept, and kept
    (and named in the error) when it fails to start."""

    def __init__(self, name: str, cmd: list[str], port: int, ready_path: str, env: dict | None = None,
                 startup_timeout_s: float = 300.0, cwd: str | None = None) -> None:
        super().__init__(None, port, None, name)  # no process until .start()
        self.cmd, self.ready_path, self.env, self.cwd = cmd, ready_path, env, cwd
        self.startup_timeout_s = startup_timeout_s
        self.returncode: int | None = None

    def start(self) -> "ProcessServer":
        started = launcher.start(self.cmd, self.port, name=self.name, env=self.env, cwd=self.cwd)
        self.proc, self.log_path = started.proc, started.log_path
        try:
            self.wait_ready(self.startup_timeout_s, self.ready_path)
        except RuntimeError:  # its group is stopped; the log stays where the error names it
            self.returncode, self.proc = self.proc.returncode, None
            raise
        return self

    def stop(self, keep_log: bool = False) -> int | None:
        """SIGTERM to the group (e.g. the gateway and its lanes); SIGKILL what is left after a
        bounded wait. Returns the main process's exit status."""
        if self.proc is None:
            return self.returncode
        self.returncode = self.stop_group()
        if not keep_log:
            self.log_path.unlink(missing_ok=True)
        self.proc = None
        return self.returncode


class StartedServer(ProcessServer):
    """`laneserve serve --model serve_model` with JSON log lines, plus `serve_args`."""

    def __init__(self, serve_model: str, serve_args: str | list[str] = "", startup_timeout_s: float = 300.0,
                 cwd: str | None = None) -> None:
        port = launcher.free_port()
        extra = shlex.split(serve_args) if isinstance(serve_args, str) else list(serve_args)
        super().__init__("laneserve", launcher.serve_command(port, "--model", serve_model, "--log-format", "json",
                                                             *extra),
                         port, "/health/ready", env=launcher.source_env(), startup_timeout_s=startup_timeout_s, cwd=cwd)
