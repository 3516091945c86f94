"""Multi-sequence forward_batch, copy_kv and the fp16 KV cache of ModelRuntime.

ModelRuntime::forward_batch has no Python binding yet, so these tests build the standalone
checker batch_forward_check.cpp with g++ against the runtime's sources (csrc/common, gguf,
quant, model; objects cached under build/batch_forward_check by content hash, at most 2
compile jobs) and run it on tiny random GGUFs and on the real SmolLM2 / Gemma 3 files.

Each checker line is "ok NAME" or "FAIL NAME: why". Every comparison in it is bit-exact
(memcmp of logits rows): a token's logits in a batch of several sequences, in any token order
and with any thread count, equal those of the same sequence run alone through forward().
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tiny_gguf import Q, TinyConfig, write_tiny_gguf

ROOT = Path(__file__).resolve().parents[3]
CSRC = ROOT / "csrc"
CHECKER = Path(__file__).with_name("batch_forward_check.cpp")
RUNTIME_DIRS = ["common", "gguf", "quant", "model"]
FLAGS = ["-std=c++17", "-O2", "-fno-math-errno", "-pthread", f"-I{CSRC}"]

TINY = {
    "llama": TinyConfig(arch="llama"),
    "gemma3-swa": TinyConfig(arch="gemma3", n_layer=6, n_head_kv=1, weight_type=Q.Q5_1, eps=1e-6, rope_base=1e6),
    "qwen2-bias-mha": TinyConfig(arch="qwen2", n_head_kv=4, weight_type=Q.Q5_0, rope_base=1e6),
}


def _sources() -> list[Path]:
    return sorted(p for d in RUNTIME_DIRS for p in (CSRC / d).glob("*.cpp")) + [CHECKER]


@pytest.fixture(scope="session")
def checker() -> Path:
    if shutil.which("g++") is None:
        pytest.skip("g++ not available")
    headers = sorted(CSRC.rglob("*.h"))
    header_hash = hashlib.sha256(b"".join(h.read_bytes() for h in headers) + " ".join(FLAGS).encode()).hexdigest()
    # pytest's cache plugin is disabled here; build/ is the setup.py build tree (git-ignored).
    cache = ROOT / "build" / "batch_forward_check"
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
        objs = list(pool.map(compile_one, _sources()))
    exe = cache / ("batch_forward_check-" + hashlib.sha256("".join(o.name for o in objs).encode()).hexdigest()[:24])
    if not exe.exists():
        subprocess.run(["g++", *FLAGS, *map(str, objs), "-o", str(exe), "-lrt"], check=True)
    return exe


def run_checker(exe: Path, *args: str) -> str:
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=900)
    out = proc.stdout
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert proc.returncode == 0 and not failed, out + proc.stderr
    return out


def _tiny(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.gguf"
    write_tiny_gguf(path, TINY[name], seed=sorted(TINY).index(name))
    return path


@pytest.mark.parametrize("name", sorted(TINY))
def test_batched_sequences_equal_each_sequence_alone(checker, tmp_path, name):
    """(a) interleaved prefill + decode, (b) any token order, (c) copy_kv, on the fast path."""
    out = run_checker(checker, "equivalence", str(_tiny(tmp_path, name)))
    for check in ("(a)interleaved_batch", "(b)shuffled_batch", "(c)copy_kv", "out_rows_subset", "decode_equals_prefill"):
        assert check in out, out


@pytest.mark.parametrize("name", ["llama", "gemma3-swa"])
def test_portable_kernels_are_equally_deterministic(checker, tmp_path, name):
    """The same guarantees with LANESERVE's scalar matmul path and the portable fp16 attention."""
    out = run_checker(checker, "equivalence", str(_tiny(tmp_path, name)), "portable")
    assert "portable" in out


def _real_model(which: str) -> Path:
    import lanes

    return Path(lanes.find_model_file(which))


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_real_models_batched_sequences_equal_alone(checker, which):
    run_checker(checker, "equivalence", str(_real_model(which)))


def test_kv_cache_is_fp16_and_lazily_committed(checker):
    """8 slots × 8192 positions of SmolLM2 reserve ~1.5 GB of fp16 KV without holding it."""
    out = run_checker(checker, "lazy", str(_real_model("smollm2")), "8192", "8")
    assert "kv_cache_bytes 1509949440 " in out, out  # 30 layers · K,V · 8 · 8192 · 192 · 2 bytes
