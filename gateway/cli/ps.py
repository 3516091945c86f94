"""`laneserve ps`: what a running server is doing — per model: status, whether it is loaded (busy,
idle and when it unloads, unloaded, loading), ready replicas, slots in use, queue depth, context per
slot, memory; then one line per lane, one per model with a prompt cache (memory used of its budget,
entries, hits, prompt tokens those hits skipped, evictions; summed over its lanes), and one per LoRA
adapter (its id for llama-server's `lora`, or why it failed to load). Read from /health/ready
(which answers 503 with the same body while unavailable or draining) and /api/ps."""
from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

from gateway.server.config import DEFAULT_URL


def _get_json(url: str, timeout_s: float, allow_503: bool = False) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        if allow_503 and exc.code == 503:
            return json.loads(exc.read())
        raise


def _size(num_bytes) -> str:
    if not isinstance(num_bytes, (int, float)) or num_bytes <= 0:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if num_bytes < 1024 or unit == "GiB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024
    return "-"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def loaded_text(residency: dict | None) -> str:
    """busy / idle, unloads in 4m12s / idle, kept / loading / unloading / unloaded / failed."""
    if not residency:
        return "loaded"
    status = residency.get("status")
    if status != "loaded":
        return str(status)
    if residency.get("in_use"):
        return "busy"
    expires_in_s = residency.get("expires_in_s")
    return "idle, kept" if expires_in_s is None else f"idle, unloads in {_duration(expires_in_s)}"


def render(ready: dict, ps: dict) -> str:
    """The table for a /health/ready body and an /api/ps body (SIZE: memory of a loaded model)."""
    sizes = {m.get("name"): m.get("size") for m in ps.get("models", [])}
    rows = [["MODEL", "STATUS", "LOADED", "REPLICAS", "SLOTS IN USE", "QUEUED", "CTX/SLOT", "SIZE"]]
    lane_rows = [["MODEL", "LANE", "STATE", "PID", "SLOTS IN USE", "RESTARTS", "KV CACHE"]]
    adapter_rows = [["MODEL", "ADAPTER", "ID", "STATUS"]]
    cache_rows = [["MODEL", "PROMPT CACHE", "ENTRIES", "HITS", "HIT TOKENS", "EVICTIONS"]]
    for name, m in ready.get("models", {}).items():
        lanes = m.get("lanes", [])
        rows.append([name, m["status"], loaded_text(m.get("residency")), f"{m['ready_replicas']}/{len(lanes)}", f"{m['slots_in_use']}/{m['slots']}",
                     str(m["queued"]), str(m["ctx_per_slot"]), _size(sizes.get(name))])
        for lane in lanes:
            lane_rows.append([name, str(lane["index"]), lane["state"], str(lane.get("pid") or "-"),
                              f"{lane['slots_in_use']}/{lane['slots']}", str(lane["restarts"]),
                              _size(lane.get("kv_cache_bytes"))])
        cache = m.get("prompt_cache")
        if cache and cache.get("budget_bytes"):
            used = _size(cache["bytes"]) if cache["bytes"] else "0 B"
            cache_rows.append([name, f"{used} / {_size(cache['budget_bytes'])}", str(cache["entries"]),
                               str(cache["hits"]), str(cache["hit_tokens"]), str(cache["evictions"])])
        for adapter in m.get("lora", []):
            adapter_rows.append([name, adapter["name"], str(adapter["id"]), "loaded"])
        for adapter_name, error in sorted(m.get("lora_errors", {}).items()):
            adapter_rows.append([name, adapter_name, "-", f"failed: {error}"])
    lines = [f"server: {ready.get('status', '?')}", ""] + _table(rows)
    for table in (lane_rows, cache_rows, adapter_rows):
        if len(table) > 1:
            lines += [""] + _table(table)
    return "\n".join(lines)


def ps(url: str = DEFAULT_URL, timeout_s: float = 5.0) -> int:
    base = url.rstrip("/")
    try:
        ready = _get_json(base + "/health/ready", timeout_s, allow_503=True)
        try:
            ps_body = _get_json(base + "/api/ps", timeout_s)
        except urllib.error.HTTPError:
            ps_body = {}  # e.g. 401 behind an API key: the sizes are only a nicety
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"laneserve ps: cannot reach {base} ({getattr(exc, 'reason', exc)})", file=sys.stderr)
        return 1
    print(render(ready, ps_body))
    return 0
