"""Helpers for tests/deploy: laneserve instances on loopback behind a real HAProxy (or nginx)
running the configuration shipped in deploy/, with ports filled in as the shipped files say
(HAProxy: environment variables; nginx: envsubst placeholders).

Balancers come from the distribution (`apt-get install haproxy nginx-light`). Missing on a
developer machine → the tests skip with that hint; in CI (`.ci/run` sets
LANESERVE_TEST_REQUIRE_BALANCERS=1 after installing them) a missing one fails the run.
"""
from __future__ import annotations

import importlib.util
import os
import re
import threading
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from gateway.cli.bench import launcher
from gateway.cli.bench.launcher import free_port

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"

# The gateway tests' server helpers (the reliability battery loads them the same way).
if "gateway_test_servers" in sys.modules:
    servers = sys.modules["gateway_test_servers"]
else:
    _spec = importlib.util.spec_from_file_location("gateway_test_servers", REPO / "tests" / "gateway" / "conftest.py")
    servers = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = servers  # where tests/reliability/conftest.py puts it too
    _spec.loader.exec_module(servers)
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


class Balancer(launcher.Launched):
    """A balancer process the launcher started; `stats_port`: HAProxy's exporter."""

    def __init__(self, launched: launcher.Launched, stats_port: int | None = None) -> None:
        super().__init__(launched.proc, launched.port, launched.log_path, launched.name)
        self.stats_port = stats_port

    def stop(self) -> None:
        try:
            self.terminate(STOP_TIMEOUT_S)
        except RuntimeError:
            pass  # killed

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
    # -db: stay in the foreground, one process (the one this test kills)
    balancer = Balancer(launcher.start([binary, "-db", "-f", str(DEPLOY / "haproxy" / "haproxy.cfg")], port,
                                       name="haproxy", log_path=tmp_dir / f"haproxy-{port}.log", env=env, cwd=tmp_dir),
                        stats_port)

    def up() -> bool:  # it forwards a readiness check and has seen every server pass its checks
        states = balancer.server_states()
        return bool(states) and (not wait_up or set(states.values()) == {"UP"})

    balancer.wait_until(up, timeout_s=15, poll_s=0.1)
    return balancer


@dataclass
class Pair:
    """Two laneserve instances; `served_by(request_id)` says which one answered."""
    instances: list = field(default_factory=list)

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{srv.port}" for srv in self.instances]

    def records(self, index: int) -> list[dict]:
        return self.instances[index].records()

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


NGINX_VARIABLES = ("LB_BIND", "LB_SERVER1", "LB_SERVER2", "LB_BALANCE")
NGINX_BALANCE = {False: "least_conn", True: "hash $http_x_session_id consistent"}


def render_nginx(values: dict[str, str]) -> str:
    """deploy/nginx/nginx.conf.template as `envsubst '${LB_BIND} …'` renders it: only the named
    ${VARIABLES} are replaced, nginx's own $variables stay."""
    text = (DEPLOY / "nginx" / "nginx.conf.template").read_text()
    for name in NGINX_VARIABLES:
        text = text.replace("${" + name + "}", values[name])
    return text


def start_nginx(tmp_dir: Path, backends: list[str], affinity: bool = False) -> Balancer:
    binary = require_binary("nginx", "nginx-light")
    port = free_port()
    prefix = tmp_dir / f"nginx-{port}"
    (prefix / "tmp").mkdir(parents=True)
    (prefix / "nginx.conf").write_text(render_nginx({
        "LB_BIND": f"127.0.0.1:{port}", "LB_SERVER1": backends[0], "LB_SERVER2": backends[1],
        "LB_BALANCE": NGINX_BALANCE[affinity]}))
    balancer = Balancer(launcher.start([binary, "-p", str(prefix), "-c", "nginx.conf", "-e", "stderr", "-g",
                                        "daemon off;"], port, name="nginx", log_path=prefix / "nginx.log", cwd=prefix))
    balancer.wait_ready(timeout_s=15, path="/health/live", poll_s=0.1)
    return balancer


# Values that legitimately differ between two runs of one request: ids, clocks, speeds, and what
# the prefix cache happened to hold (the same prompt may be cached on one instance, not the other).
VOLATILE = re.compile(
    rb'"(id|created|created_at|ttft|tps|total_duration|load_duration|prompt_eval_duration|eval_duration|'
    rb'prompt_ms|prompt_per_token_ms|prompt_per_second|predicted_ms|predicted_per_token_ms|'
    rb'predicted_per_second|cache_n|prompt_n|cached_tokens)":("[^"]*"|[-0-9.eE+]+)')

CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 24,
        "temperature": 0, "seed": 1, "stream": True, "stream_options": {"include_usage": True}}
COMPLETION = {"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0,
              "stream": True}
OLLAMA_CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hello."}],
               "options": {"temperature": 0, "num_predict": 16, "seed": 1}}


def normalized(body: bytes) -> bytes:
    return VOLATILE.sub(rb'"\1":_', body)


def read_stream(response: httpx.Response) -> dict:
    """Events of an SSE stream until it ends, cleanly or not."""
    out = {"events": [], "done": False, "error": None, "transport_error": None}
    try:
        for line in response.iter_lines():
            if line == "data: [DONE]":
                out["done"] = True
            elif line.startswith("data: "):
                out["events"].append(line)
                if '"error"' in line and line.startswith('data: {"error"'):
                    out["error"] = line
    except httpx.HTTPError as exc:
        out["transport_error"] = type(exc).__name__
    return out



STREAM_REQUESTS = (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION), ("/api/chat", OLLAMA_CHAT))


def assert_streams_identical(balancer: Balancer, pair: Pair) -> None:
    """Each streamed request gives the same bytes through the balancer as straight from either
    instance, once the legitimately volatile values are masked (temperature 0, seeded)."""
    for route, body in STREAM_REQUESTS:
        bodies = []
        for base in [balancer.base_url] + [srv.base_url for srv in pair.instances]:
            r = httpx.post(base + route, json=body, timeout=60)
            assert r.status_code == 200, r.text
            bodies.append((r.headers["content-type"], normalized(r.content)))
        assert bodies[0][1].count(b"\n") > 3, bodies[0]  # streamed in many events
        assert bodies[0] == bodies[1] == bodies[2], (route, bodies)


def assert_long_prompt_reaches_laneserve(balancer: Balancer) -> None:
    """A 150 KB body (more than HAProxy's and nginx's default buffers) passes to laneserve, which
    answers for itself: here 400 `context_length_exceeded` (the test instances' context is 512)."""
    r = httpx.post(balancer.base_url + "/v1/completions", timeout=60,
                   json={"model": "smollm2", "prompt": "word " * 30_000, "max_tokens": 1})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", (r.status_code, r.text[:300])


class ClosedLoad:
    """`workers` clients sending short completions back to back (streamed and not, alternately)
    through `base_url` until stopped; every outcome is kept with its time."""

    def __init__(self, base_url: str, workers: int = 4) -> None:
        self.base_url = base_url
        self.outcomes: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(workers)]

    def __enter__(self) -> "ClosedLoad":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    @property
    def failures(self) -> list[tuple[float, str]]:
        return [o for o in self.outcomes if o[1] != "ok"]

    def _loop(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=30) as client:
            n = 0
            while not self._stop.is_set():
                n += 1
                body = {**COMPLETION, "max_tokens": 8, "stream": n % 2 == 0}
                try:
                    if body["stream"]:
                        with client.stream("POST", "/v1/completions", json=body) as r:
                            result = read_stream(r) if r.status_code == 200 else {"status": r.status_code}
                        ok = result.get("done") and not result.get("error") and not result.get("transport_error")
                        what = "ok" if ok else f"stream {result}"
                    else:
                        r = client.post("/v1/completions", json=body)
                        what = "ok" if r.status_code == 200 else f"status {r.status_code} {r.text[:200]}"
                except httpx.HTTPError as exc:
                    what = f"transport {type(exc).__name__}"
                self.outcomes.append((time.monotonic(), what))


def best_ttft_ms(base_url: str, count: int = 3) -> float:
    """The quickest of `count` streamed completions' time to the first text event, in ms
    (gateway.cli.bench's client: request written → first text event)."""
    import asyncio

    from gateway.cli.bench.client import Conn, stream_request

    async def run() -> list[float]:
        conn = Conn(base_url)
        out = []
        for i in range(count):
            record = await stream_request(conn, "/v1/completions", {
                "model": "smollm2", "prompt": f"{i}. Tell me a story.", "max_tokens": 8, "ignore_eos": True,
                "stream": True})
            assert "error" not in record, record
            out.append(record["ttft_s"] * 1e3)
        conn.close()
        return out

    return min(asyncio.run(run()))


def assert_first_event_not_held_back(balancer: Balancer, pair: Pair) -> None:
    """A balancer that holds small writes back (HAProxy without `option http-no-delay`: ~200 ms
    before the first event) is caught; the bound is wide for a loaded CI machine."""
    direct = best_ttft_ms(pair.instances[0].base_url)
    through = best_ttft_ms(balancer.base_url)
    assert through < direct + 100.0, (direct, through)
