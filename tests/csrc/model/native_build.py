"""Builds a standalone C++ checker (tests/csrc/model/*_check.cpp) with g++ against the runtime's
sources (csrc/common, gguf, quant, model), for the native code that has no Python binding.

Objects are cached under build/native_checks by content hash, shared by every checker (the
runtime's ~60 sources are the same objects for each: compiled once per tree state, not once per
checker), at most 2 compile jobs (the machine has 2 cores), at -O3 like setup.py so timings and
code paths match the extension.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CSRC = ROOT / "csrc"
RUNTIME_DIRS = ["common", "gguf", "quant", "model"]
FLAGS = ["-std=c++17", "-O3", "-fno-math-errno", "-pthread", f"-I{CSRC}"]


def build_checker(checker: Path) -> Path:
    if shutil.which("g++") is None:
        pytest.skip("g++ not available")
    sources = sorted(p for d in RUNTIME_DIRS for p in (CSRC / d).glob("*.cpp")) + [checker]
    headers = sorted(CSRC.rglob("*.h")) + sorted(Path(__file__).parent.glob("*.h"))  # + check_report.h
    header_hash = hashlib.sha256(b"".join(h.read_bytes() for h in headers) + " ".join(FLAGS).encode()).hexdigest()
    # pytest's cache plugin is disabled here; build/ is the setup.py build tree (git-ignored).
    cache = ROOT / "build" / "native_checks"
    cache.mkdir(parents=True, exist_ok=True)

    def compile_one(src: Path) -> Path:
        digest = hashlib.sha256(src.read_bytes() + header_hash.encode()).hexdigest()[:24]
        obj = cache / f"{src.stem}-{digest}.o"
        if not obj.exists():
            tmp = obj.with_suffix(f".{os.getpid()}.tmp")
            subprocess.run(["g++", *FLAGS, "-c", str(src), "-o", str(tmp)], check=True)
            tmp.replace(obj)
        return obj

    with ThreadPoolExecutor(max_workers=2) as pool:  # the machine has 2 cores; never more jobs
        objs = list(pool.map(compile_one, sources))
    exe = cache / (checker.stem + "-" + hashlib.sha256("".join(o.name for o in objs).encode()).hexdigest()[:24])
    if not exe.exists():
        subprocess.run(["g++", *FLAGS, *map(str, objs), "-o", str(exe), "-lrt"], check=True)
    return exe


def run_checker(exe: Path, *args: str, timeout_s: float = 900) -> str:
    """Runs the checker; fails the test on a non-zero exit or any "FAIL" line."""
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout_s)
    out = proc.stdout
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert proc.returncode == 0 and not failed, out + proc.stderr
    return out
