"""Helpers the battery's tests and fixtures share: process counts from /proc, the gateway's
/dev/shm names, readiness, bystander streams' inter-token gaps."""
from __future__ import annotations

import os
import threading
import time

import httpx


def proc_counts(pid: int) -> tuple[int, int, int]:
    """(RSS kB, open fds, threads)."""
    rss = threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd")), threads


def zombies_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == pid:
            out.append(int(entry))
    return out


def shm_names(pid: int) -> list[str]:
    from lanes.names import list_names

    return list_names(pid=pid)


def ready_body(base_url: str) -> dict:
    return httpx.get(base_url + "/health/ready", timeout=5.0).json()


def lane_pids(base_url: str, model: str | None = None) -> list[int]:
    body = ready_body(base_url)
    return [lane["pid"] for name, m in body["models"].items() if model in (None, name) for lane in m["lanes"]]


def settled(body: dict) -> bool:
    return body["status"] == "ready" and all(
        m["slots_in_use"] == 0 and m["queued"] == 0 for m in body["models"].values())


class StreamGaps:
    """On a thread, one streamed request after another (`body`), noting when each content event
    arrived, so the inter-token gaps of bystanders can be compared before and during a fault."""

    def __init__(self, base_url: str, body: dict, path: str = "/v1/completions") -> None:
        self._base_url, self._body, self._path = base_url, {**body, "stream": True}, path
        self._stop = threading.Event()
        self.streams: list[list[float]] = []  # arrival times (time.monotonic) per stream
        self.errors: list[str] = []
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
                                self.errors.append(line[:200])
                            times.append(time.monotonic())
                        if self._stop.is_set():
                            break

    def gaps_s(self, t_from: float, t_to: float) -> list[float]:
        """Gaps between consecutive events of one stream whose later event arrived in [t_from, t_to)."""
        return [b - a for times in self.streams for a, b in zip(times, times[1:]) if t_from <= b < t_to]
