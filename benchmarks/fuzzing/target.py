"""The shape of one fuzz target (see benchmarks/fuzzing/__init__.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable


@dataclass(frozen=True)
class Target:
    setup: Callable[[], Any]
    one_input: Callable[[Any, bytes], None]
    seeds: Callable[[], Iterable[bytes]]
    what: str
