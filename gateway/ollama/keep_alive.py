"""Ollama's `keep_alive`: how long a model stays loaded after a request — a Go duration string
("5m", "1h30m", "90s", "500ms", "-1m") or a number of seconds; 0 unloads it once idle, a negative
value keeps it loaded. Applied by gateway.server.residency."""
from __future__ import annotations

import math
import re

_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^([+-]?)((?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+$")
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
MAX_KEEP_ALIVE_S = 10 * 365 * 86400.0  # longer values mean "never" anyway


class KeepAliveError(ValueError):
    pass


def parse_keep_alive(value: object) -> float | None:
    """Seconds (negative: never unload), or None when the request carries none."""
    if value is None:
        return None
    if type(value) in (int, float):
        seconds = float(value)
    elif type(value) is str:
        seconds = _duration_s(value.strip())
    else:
        raise KeepAliveError("keep_alive must be a duration string or a number of seconds")
    if not math.isfinite(seconds):
        raise KeepAliveError("keep_alive must be finite")
    return min(seconds, MAX_KEEP_ALIVE_S)


def _duration_s(text: str) -> float:
    try:
        return float(text)  # "300", "-1": seconds, as Ollama reads a bare number
    except ValueError:
        pass
    match = _DURATION.match(text)
    if match is None:
        raise KeepAliveError(f"keep_alive: {text[:32]!r} is not a duration such as \"5m\", \"1h30m\" or \"-1\"")
    total = sum(float(number) * _UNIT_S[unit] for number, unit in _PART.findall(text))
    return -total if match.group(1) == "-" else total
