"""Every fuzz target by name (benchmarks/fuzz.py --list)."""
from __future__ import annotations

from benchmarks.fuzzing import native_targets, text_targets
from benchmarks.fuzzing.target import Target

TARGETS: dict[str, Target] = {**native_targets.TARGETS, **text_targets.TARGETS}


def target_named(name: str) -> Target:
    if name not in TARGETS:
        raise SystemExit(f"unknown fuzz target {name!r}; one of: {', '.join(TARGETS)}")
    return TARGETS[name]
