"""What a benchmark or a reliability test reads of a running server process from /proc: its RSS,
open fds and threads (leak checks, RSS slopes), its CPU time and its zombie children."""
from __future__ import annotations

import os
import time


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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid`: all its threads, those that already ended too, and
    none of its children (a gateway's lanes are not counted). It is the sum that /proc/PID/stat
    gives as utime + stime in clock ticks (10 ms), read in ns from the kernel's per-process CPU clock
    (clock_getcpuclockid's id, computed here: Python does not wrap that call)."""
    try:
        return time.clock_gettime_ns((~pid << 3) | 2) / 1e9  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    except OSError:  # a kernel without other processes' CPU clocks: the ticks of /proc/PID/stat
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
