"""Helpers the battery's tests and fixtures share: process counts from /proc, the gateway's
/dev/shm names, readiness."""
from __future__ import annotations

import os

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
