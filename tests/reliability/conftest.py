"""Fixtures for the reliability battery (R1–R24): servers on loopback, and the global invariants
checked after every test against every server the test used (see `Watched.check`):

1. the gateway is alive, and a follow-up valid request succeeds;
2. every lane is back to ready with no slot in use and nothing queued (within 5 s);
3. the gateway's /dev/shm names (lanes.names, created by the server process) are back to their
   count at start;
4. the gateway's open fds and threads are back near their count at start (a few fds of
   connections still closing; asyncio's bounded executor may add threads once);
5. no zombie children;
6. no unhandled exception (a 500) in the server log.
"""
from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # --import-mode=importlib: make harness importable
from harness import PROBE, proc_counts, ready_body, settled, shm_names, zombies_of  # noqa: E402

_spec = importlib.util.spec_from_file_location("gateway_test_servers",
                                               Path(__file__).resolve().parents[1] / "gateway" / "conftest.py")
servers = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = servers  # tests/deploy/balancers.py reuses it from there
_spec.loader.exec_module(servers)
start_server = servers.start_server
serving_stack_missing = servers.serving_stack_missing

SETTLE_S = 5.0
FD_SLACK = 4
THREAD_SLACK = 8  # asyncio's default executor (tokenizing large prompts) grows to min(32, cpus + 4) once
SYNTHETIC = "synthetic:step_us={step_us},slots={slots}"


class Watched:
    """A server whose invariants are checked after each test that used it."""

    def __init__(self, srv, model: str, headers: dict | None = None) -> None:
        self.srv = srv
        self.headers = headers or {}
        self.model = model
        self.pid = srv.proc.pid
        self.base_url = srv.base_url
        _, self.fds, self.threads = proc_counts(self.pid)
        self.shm = len(shm_names(self.pid))

    def log_text(self) -> str:
        return self.srv.log_text()

    def check(self) -> None:
        assert self.srv.proc.poll() is None, f"server died:\n{self.log_text()[-3000:]}"
        assert PROBE.get(self.base_url + "/health/live").status_code == 200
        deadline = time.monotonic() + SETTLE_S
        while True:
            body = ready_body(self.base_url)
            _, fds, threads = proc_counts(self.pid)
            shm = len(shm_names(self.pid))
            ok = settled(body) and shm == self.shm and fds <= self.fds + FD_SLACK
            if ok or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert settled(body), f"lanes not back to ready/idle within {SETTLE_S} s: {body}"
        assert shm == self.shm, f"/dev/shm names {self.shm} at start, {shm} now: {shm_names(self.pid)}"
        assert fds <= self.fds + FD_SLACK, f"fds {self.fds} at start, {fds} now"
        assert threads <= self.threads + THREAD_SLACK, f"threads {self.threads} at start, {threads} now"
        assert not zombies_of(self.pid), "zombie children"
        follow_up = PROBE.post(self.base_url + "/v1/completions", timeout=30.0, headers=self.headers,
                               json={"model": self.model, "prompt": "Hello", "max_tokens": 1})
        assert follow_up.status_code == 200, follow_up.text
        assert "unhandled_exception" not in self.log_text(), self.log_text()[-3000:]


_watched: list[Watched] = []


def watch(srv, model: str = "smollm2", headers: dict | None = None) -> Watched:
    w = Watched(srv, model, headers)
    _watched.append(w)
    return w


def unwatch(w: Watched) -> None:
    if w in _watched:
        _watched.remove(w)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.call_failed = report.failed


@pytest.fixture(autouse=True)
def global_invariants(request):
    yield
    if getattr(request.node, "call_failed", True):
        return  # the test's own failure says more; a skipped test has no call phase either
    for w in list(_watched):
        if w.srv.proc.poll() is None:
            w.check()


def _start(tmp_path_factory, name: str, *args: str, real_model: bool = True, env: dict | None = None,
           wait: bool = True):
    reason = serving_stack_missing(real_model=real_model)
    if reason:
        pytest.skip(reason)
    srv = start_server(tmp_path_factory.mktemp(name), *args, env=env)
    if wait:
        srv.wait_ready()
    return srv


BATTERY_ARGS = ("--replicas", "2", "--ctx-size", "256", "--keepalive-interval-s", "1", "--heartbeat-timeout-s", "30")


def _battery_args(run_dir: Path) -> tuple:
    """BATTERY_ARGS plus a prefix-cache directory of its own, so the fuzzers reach the slot-file
    routes (without one every /slots call is a 501 by design)."""
    cache_dir = run_dir / "prefix-cache"
    cache_dir.mkdir(exist_ok=True)
    return (*BATTERY_ARGS, "--prefix-cache-dir", str(cache_dir))
_battery_launch: dict = {}  # "srv": the SmolLM2 server launched once collection shows a test needs it


def pytest_collection_modifyitems(session, config, items):
    """When this directory runs on its own and a collected test needs the battery's SmolLM2
    server, launch it now: its ~2 s start-up then overlaps the tests that run before its first
    user (the `battery` fixture waits for it). In a whole-suite run it starts when first used,
    rather than idling through the other directories."""
    here = Path(__file__).resolve().parent
    if not items or not all(Path(str(item.path)).resolve().is_relative_to(here) for item in items):
        return
    if any("battery" in getattr(item, "fixturenames", ()) for item in items) and not serving_stack_missing():
        # config._tmp_path_factory is what pytest's own tmp_path_factory fixture returns
        run_dir = Path(config._tmp_path_factory.mktemp("battery"))
        _battery_launch["srv"] = start_server(run_dir, *_battery_args(run_dir))


def pytest_sessionfinish(session, exitstatus):
    srv = _battery_launch.pop("srv", None)
    if srv is not None:
        srv.kill()  # launched but never used (the fixture stops it otherwise)


@pytest.fixture(scope="session")
def battery(tmp_path_factory):
    """SmolLM2, two lanes of one thread each, 256-token context, 1 s keep-alive comments."""
    srv = _battery_launch.get("srv")
    if srv is None:
        run_dir = tmp_path_factory.mktemp("battery-dir")
        srv = _start(tmp_path_factory, "battery", *_battery_args(run_dir))
    else:
        srv.wait_ready()
    w = watch(srv)
    yield w
    unwatch(w)
    _battery_launch.pop("srv", None)
    assert srv.terminate() == 0, srv.log_text()[-3000:]


@pytest.fixture
def smollm2_factory(tmp_path_factory):
    """Start SmolLM2 servers with the given arguments (unwatched), each stopped cleanly at the end."""
    started = []

    def start(*args: str):
        srv = _start(tmp_path_factory, "smollm2", *args)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        assert srv.terminate() == 0, srv.log_text()[-3000:]


@pytest.fixture(scope="module")
def synthetic_factory(tmp_path_factory):
    """Start synthetic-backend servers (no weights; SmolLM2's tokenizer), stopped at module end.
    `wait=False` (unwatched servers only) returns once launched: the caller waits for several
    at once (`wait_ready`), so their start-ups overlap."""
    started = []

    def start(*args: str, model: str = "m", watched: bool = True, env: dict | None = None,
              headers: dict | None = None, wait: bool = True, **spec):
        assert wait or not watched, "a watched server's counts are taken once it is ready"
        source = SYNTHETIC.format(step_us=spec.pop("step_us", 5000), slots=spec.pop("slots", 2))
        source += "".join(f",{k}={v}" for k, v in spec.items())
        srv = _start(tmp_path_factory, "synthetic", "--model", f"{model}={source}", *args, real_model=False, env=env,
                     wait=wait)
        w = watch(srv, model, headers) if watched else None
        started.append((srv, w))
        return w or srv

    yield start
    alive = []
    for srv, w in started:
        if w is not None:
            unwatch(w)
        if srv.proc.poll() is None:
            srv.proc.send_signal(signal.SIGTERM)  # all at once: their drains overlap
            alive.append(srv)
    for srv in alive:
        try:
            srv.proc.wait(servers.STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            srv.kill()
