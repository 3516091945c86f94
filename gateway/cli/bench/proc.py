"""What a benchmark or a reliability test reads of a running server process from /proc: its RSS,
open fds and threads (leak checks, RSS slopes) and its zombie children."""
from __future__ import annotations

import os


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
    """Children of `pid` that exited and were never waited for."""
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
