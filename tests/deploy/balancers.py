"""Helpers for tests/deploy: laneserve instances on loopback behind a real HAProxy (or nginx)
running the configuration shipped in deploy/, with ports filled in as the shipped files say
(HAProxy: environment variables; nginx: envsubst placeholders).

Balancers come from the distribution (`apt-get install haproxy nginx-light`). Missing on a
developer machine → the tests skip with that hint; in CI (`.ci/run` sets
LANESERVE_TEST_REQUIRE_BALANCERS=1 after installing them) a missing one fails the run.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"

# The gateway tests' server helpers (the reliability battery loads them the same way).
if "gateway_test_servers" in sys.modules:
    servers = sys.modules["gateway_test_servers"]
else:
    _spec = importlib.util.spec_from_file_location("gateway_test_servers", REPO / "tests" / "gateway" / "conftest.py")
    servers = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = servers  # dataclasses look their module up there
    _spec.loader.exec_module(servers)
free_port = servers.free_port
start_server = servers.start_server
serving_stack_missing = servers.serving_stack_missing

# What deploy/README.md tells operators to run each instance with behind a balancer.
DRAIN_DELAY_S = 3.0
# Light instances: one compute thread each (2 cores for two instances), small context.
INSTANCE_ARGS = ("--ctx-size", "512", "--drain-delay-s", str(DRAIN_DELAY_S), "--keepalive-interval-s", "1")
STOP_TIMEOUT_S = 10.0


def find_binary(name: str) -> str | None:
    """`name` on PATH or in the sbin directories a non-root PATH often lacks."""
    found = shutil.which(name)
    if found:
        return found
    for folder in ("/usr/sbin", "/usr/local/sbin", "/sbin"):
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def require_binary(name: str, package: str) -> str:
    path = find_binary(name)
    if path:
        return path
    message = f"{name} is not installed (apt-get install {package})"
    if os.environ.get("LANESERVE_TEST_REQUIRE_BALANCERS"):
        pytest.fail(message + "; CI requires it", pytrace=False)
    pytest.skip(message)


@dataclass
class Balancer:
    proc: subprocess.Popen
    port: int
    stats_port: int | None
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)

    def server_states(self) -> dict[str, str]:
        """HAProxy only: server name → UP/DOWN/… from the shipped Prometheus exporter."""
        text = httpx.get(f"http://127.0.0.1:{self.stats_port}/metrics", timeout=5).text
        states = {}
        for line in text.splitlines():
            if line.startswith("haproxy_server_status{") and line.endswith(" 1"):
                labels = dict(part.split("=", 1) for part in line[line.index("{") + 1:line.index("}")].split(","))
                states[labels["server"].strip('"')] = labels["state"].strip('"')
        return states


def start_haproxy(tmp_dir: Path, backends: list[str], affinity: bool = False, wait_up: bool = True) -> Balancer:
    """HAProxy on the shipped deploy/haproxy/haproxy.cfg, its addresses from the environment;
    returned once its exporter answers (and, with `wait_up`, every server passed its checks)."""
    binary = require_binary("haproxy", "haproxy")
    port, stats_port = free_port(), free_port()
    env = {**os.environ, "LB_BIND": f"127.0.0.1:{port}", "LB_STATS_BIND": f"127.0.0.1:{stats_port}",
           "LB_SERVER1": backends[0], "LB_SERVER2": backends[1]}
    if affinity:
        env["LB_SESSION_AFFINITY"] = "1"
    else:
        env.pop("LB_SESSION_AFFINITY", None)
    log_path = tmp_dir / f"haproxy-{port}.log"
    with open(log_path, "wb") as log:
        # -db: stay in the foreground, one process (the one this test kills)
        proc = subprocess.Popen([binary, "-db", "-f", str(DEPLOY / "haproxy" / "haproxy.cfg")], stdout=log,
                                stderr=subprocess.STDOUT, env=env, cwd=tmp_dir, start_new_session=True)
    balancer = Balancer(proc, port, stats_port, log_path)
    deadline = time.monotonic() + 15
    while True:  # up once it forwards a readiness check and has seen every server pass its checks
        if proc.poll() is not None:
            raise RuntimeError(f"haproxy exited with {proc.returncode}:\n{balancer.log_text()[-3000:]}")
        try:
            states = balancer.server_states()
            if states and (not wait_up or set(states.values()) == {"UP"}):
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            balancer.stop()
            raise RuntimeError(f"haproxy not ready:\n{balancer.log_text()[-3000:]}")
        time.sleep(0.1)
    return balancer


@dataclass
class Pair:
    """Two laneserve instances; `served_by(request_id)` says which one answered."""
    instances: list = field(default_factory=list)

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{srv.port}" for srv in self.instances]

    def records(self, index: int) -> list[dict]:
        path = self.instances[index].records_path
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def served_by(self, request_id: str, timeout_s: float = 5.0) -> int:
        deadline = time.monotonic() + timeout_s
        while True:
            found = [i for i in range(len(self.instances))
                     if any(r["request_id"] == request_id for r in self.records(i))]
            if found or time.monotonic() > deadline:
                assert len(found) == 1, (request_id, found)
                return found[0]
            time.sleep(0.05)

    def stop(self) -> None:
        for srv in self.instances:
            srv.kill()


def start_pair(tmp_dir: Path, *extra_args: str) -> Pair:
    reason = serving_stack_missing()
    if reason:
        pytest.skip(reason)
    pair = Pair()
    try:
        for index in range(2):
            folder = tmp_dir / f"instance{index}"
            folder.mkdir(exist_ok=True)
            pair.instances.append(start_server(folder, *INSTANCE_ARGS, *extra_args))
        for srv in pair.instances:
            srv.wait_ready()
    except BaseException:
        pair.stop()
        raise
    return pair
