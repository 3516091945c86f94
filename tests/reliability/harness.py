"""Helpers the battery's tests and fixtures share: process counts from /proc (gateway.cli.bench.proc,
shared with benchmarks/), the gateway's /dev/shm names, readiness, bystander streams'
inter-token gaps."""
from __future__ import annotations

import threading
import time

import httpx

from gateway.cli.bench.proc import proc_counts, zombies_of  # noqa: F401  (the battery's names for them)


def shm_names(pid: int) -> list[str]:
    from lanes.names import list_names

    return list_names(pid=pid)


# One client for the probes: httpx.get() builds a client (and an SSL context) per call, ~30 ms
# each, which the invariant checks after every test multiplied into seconds.
PROBE = httpx.Client(timeout=5.0)


def ready_body(base_url: str) -> dict:
    return PROBE.get(base_url + "/health/ready").json()


def lane_pids(base_url: str, model: str | None = None) -> list[int]:
    body = ready_body(base_url)
    return [lane["pid"] for name, m in body["models"].items() if model in (None, name) for lane in m["lanes"]]


def settled(body: dict) -> bool:
    return body["status"] == "ready" and all(
        m["slots_in_use"] == 0 and m["queued"] == 0 for m in body["models"].values())


class StreamGaps:
    """On a thread, one streamed request after another (`body`; only one with repeat=False),
    noting when each content event arrived, so the inter-token gaps of bystanders can be compared
    before and during a fault. Used by the battery and by benchmarks/battery_long.py."""

    def __init__(self, base_url: str, body: dict, path: str = "/v1/completions", repeat: bool = True) -> None:
        self._base_url, self._body, self._path = base_url, {**body, "stream": True}, path
        self._repeat = repeat
        self._stop = threading.Event()
        self.streams: list[list[float]] = []  # arrival times (time.monotonic) per stream
        self.errors: list[tuple[int, float, str]] = []  # (stream index, arrival, event) of error events
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "StreamGaps":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        with httpx.Client(base_url=self._base_url, timeout=30) as client:
            while not self._stop.is_set():
                times: list[float] = []
                self.streams.append(times)
                with client.stream("POST", self._path, json=self._body) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            if '"error"' in line:
                                self.errors.append((len(self.streams) - 1, time.monotonic(), line[:200]))
                            else:
                                times.append(time.monotonic())
                        if self._stop.is_set():
                            break
                if not self._repeat:
                    return

    def gaps_s(self, t_from: float, t_to: float, streams: list[int] | None = None) -> list[float]:
        """Gaps between consecutive events of one stream (all, or those indexed) whose later
        event arrived in [t_from, t_to)."""
        chosen = self.streams if streams is None else [self.streams[i] for i in streams]
        return [b - a for times in chosen for a, b in zip(times, times[1:]) if t_from <= b < t_to]

    def clean_streams(self) -> list[int]:
        """Indexes of the streams that carried no error event."""
        failed = {i for i, _, _ in self.errors}
        return [i for i in range(len(self.streams)) if i not in failed]


def benchmark_module(name: str):
    """benchmarks/<name>.py imported as a module (the battery runs short forms of benchmarks);
    benchmarks/ goes on sys.path for the helpers those scripts import."""
    import importlib.util
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    if str(bench) not in sys.path:
        sys.path.insert(0, str(bench))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, bench / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
