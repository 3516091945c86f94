"""The fuzz targets of benchmarks/fuzz.py: every input a fuzzer once crashed on
(tests/data/fuzz/TARGET/*) replays clean, every seed runs clean, and — LANESERVE_FUZZ_SECONDS > 0,
as .ci/sanitize sets under the ASan build — each target fuzzes for that long without a finding."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # benchmarks/ is not a package of the wheel

pytest.importorskip("atheris")
from benchmarks.fuzzing.registry import TARGETS  # noqa: E402

REGRESSIONS = ROOT / "tests" / "data" / "fuzz"
FUZZ_SECONDS = int(os.environ.get("LANESERVE_FUZZ_SECONDS", "0"))


@pytest.fixture(scope="module")
def states():
    made = {}

    def state(name):
        if name not in made:
            made[name] = TARGETS[name].setup()
        return made[name]
    return state


@pytest.mark.parametrize("name", TARGETS)
def test_seeds_and_regression_inputs_run_clean(name, states):
    target = TARGETS[name]
    inputs = list(target.seeds())
    regressions = sorted((REGRESSIONS / name).glob("*")) if (REGRESSIONS / name).is_dir() else []
    inputs += [p.read_bytes() for p in regressions]
    assert inputs
    for data in inputs:
        target.one_input(states(name), data)


def test_every_regression_directory_names_a_target():
    assert {p.name for p in REGRESSIONS.iterdir()} <= set(TARGETS)


@pytest.mark.skipif(FUZZ_SECONDS <= 0, reason="LANESERVE_FUZZ_SECONDS not set (.ci/sanitize sets it)")
@pytest.mark.parametrize("name", TARGETS)
def test_bounded_fuzzing_finds_nothing(name, tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fuzz.py"), name, "--seconds", str(FUZZ_SECONDS),
                           "--work", str(tmp_path)], capture_output=True, text=True, timeout=FUZZ_SECONDS + 600)
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0 and not figures["findings"], proc.stderr[-4000:]
    assert figures["executions"] > 0
