"""Names of shared-memory segments and semaphores, stale-name sweeping, /dev/shm space checks.

Every name is `/laneserve-<creator pid>-<run id>-<rest>`: names survive SIGKILL, so a restarted
server can tell its own names from a dead run's (creator pid not alive → swept at start).
"""
from __future__ import annotations

import os
import re
import secrets

import posix_ipc

PREFIX = "laneserve"
_ENTRY = re.compile(rf"^(sem\.)?{PREFIX}-(\d+)-([0-9a-f]+)-")


def new_run_id() -> str:
    return secrets.token_hex(4)


def make_name(run_id: str, *parts: str) -> str:
    return f"/{PREFIX}-{os.getpid()}-{run_id}-" + "-".join(parts)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unlink_entry(entry: str) -> None:
    try:
        if entry.startswith("sem."):
            posix_ipc.unlink_semaphore("/" + entry[4:])
        else:
            posix_ipc.unlink_shared_memory("/" + entry)
    except posix_ipc.ExistentialError:
        pass  # someone else swept it first


def list_names(shm_dir: str = "/dev/shm", pid: int | None = None, run_id: str | None = None) -> list[str]:
    """Our /dev/shm entries (as directory entries, e.g. 'sem.laneserve-…'), optionally filtered."""
    try:
        entries = os.listdir(shm_dir)
    except FileNotFoundError:
        return []
    out = []
    for entry in entries:
        m = _ENTRY.match(entry)
        if m and (pid is None or int(m.group(2)) == pid) and (run_id is None or m.group(3) == run_id):
            out.append(entry)
    return sorted(out)


def sweep_stale(shm_dir: str = "/dev/shm") -> list[str]:
    """Unlink names whose creator process is gone; returns what was removed."""
    removed = []
    for entry in list_names(shm_dir):
        pid = int(_ENTRY.match(entry).group(2))
        if pid != os.getpid() and not _pid_alive(pid):
            _unlink_entry(entry)
            removed.append(entry)
    return removed


def unlink_run(run_id: str, shm_dir: str = "/dev/shm") -> None:
    """Backstop: remove every name this process created for run_id."""
    for entry in list_names(shm_dir, pid=os.getpid(), run_id=run_id):
        _unlink_entry(entry)


class ShmSpaceError(OSError):
    pass


def check_free_space(needed_bytes: int, shm_dir: str = "/dev/shm") -> None:
    st = os.statvfs(shm_dir)
    free = st.f_bavail * st.f_frsize
    if free < needed_bytes:
        raise ShmSpaceError(
            f"{shm_dir} has {free / 2**20:.1f} MiB free but the lane rings need {needed_bytes / 2**20:.1f} MiB; "
            f"free space there or enlarge it (Docker: --shm-size)")
