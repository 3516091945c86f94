"""Repacked weights shared through a cache file (csrc/model/repack_store.h), with the real SmolLM2:
built once, mapped by every later load (also concurrently, from other processes), rebuilt when
corrupt, truncated or when the model file changes, never failing a load when unusable."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lanes
from lanes import Model

PROMPT = "The capital of France is"
IMPORT_ROOT = Path(lanes.__file__).resolve().parent.parent  # installed package or source tree, as this process


def load(path, cache_dir: str | Path) -> Model:
    return Model(path, threads=2, ctx_size=256, max_batch=64, repack_cache_dir=str(cache_dir))


def last_logits(m: Model) -> np.ndarray:
    return m.logits(m.tokenize(PROMPT))[-1]


@pytest.fixture(scope="module")
def model_path() -> Path:
    return lanes.find_model_file("smollm2")


@pytest.fixture(scope="module")
def reference(model_path) -> np.ndarray:
    m = load(model_path, "")
    assert m.repack_status == "private (no cache dir)"
    return last_logits(m)


def cache_files(d: Path) -> list[Path]:
    return sorted(d.glob("*.lsrp"))


def test_built_once_then_mapped_with_identical_results(model_path, reference, tmp_path):
    first = load(model_path, tmp_path)
    assert first.repack_status.startswith("built "), first.repack_status
    (file,) = cache_files(tmp_path)
    assert str(file) in first.repack_status
    second = load(model_path, tmp_path)
    assert second.repack_status == f"mapped {file}"
    assert np.array_equal(last_logits(first), reference)
    assert np.array_equal(last_logits(second), reference)
    assert not list(tmp_path.glob("*.tmp.*"))


@pytest.mark.parametrize("damage", ["flip_data_byte", "flip_header_byte", "truncate"])
def test_a_damaged_cache_is_ignored_and_rebuilt(model_path, reference, tmp_path, damage):
    load(model_path, tmp_path)
    (file,) = cache_files(tmp_path)
    size = file.stat().st_size
    with open(file, "r+b") as f:
        if damage == "truncate":
            f.truncate(size - 4096)
        else:
            f.seek(size // 2 if damage == "flip_data_byte" else 20)  # 20: inside the recorded data size
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0x40]))
    m = load(model_path, tmp_path)
    assert m.repack_status.startswith(f"built {file} rebuilt ("), m.repack_status
    assert np.array_equal(last_logits(m), reference)
    assert file.stat().st_size == size
    assert load(model_path, tmp_path).repack_status == f"mapped {file}"


def test_a_changed_model_file_gets_a_new_cache_and_the_old_one_goes(model_path, reference, tmp_path):
    copy = tmp_path / "model" / "m.gguf"
    copy.parent.mkdir()
    shutil.copyfile(model_path, copy)
    cache = tmp_path / "cache"
    load(copy, cache)
    (old,) = cache_files(cache)
    st = copy.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # same bytes, "new" file
    m = load(copy, cache)
    (new,) = cache_files(cache)
    assert new != old and m.repack_status.startswith(f"built {new}")
    assert np.array_equal(last_logits(m), reference)


def test_an_unusable_cache_dir_falls_back_to_private_memory(model_path, reference, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    m = load(model_path, blocker / "cache")
    assert m.repack_status.startswith("private (mkdir "), m.repack_status
    assert np.array_equal(last_logits(m), reference)


CHILD = """
import sys, lanes
from lanes import Model
m = Model(lanes.find_model_file("smollm2"), threads=1, ctx_size=256, max_batch=64, repack_cache_dir=sys.argv[1])
maps = open("/proc/self/maps").read()
print(m.repack_status.split(" ")[0], sum(".lsrp" in line for line in maps.splitlines()) > 0)
"""


def test_processes_loading_at_once_build_once_and_share_the_file(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(IMPORT_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(o[0] for o in outs) == ["built", "mapped", "mapped"], outs
    assert all(o[1] == "True" for o in outs)  # each process maps the cache file itself
    assert len(cache_files(tmp_path)) == 1 and not list(tmp_path.glob("*.tmp.*"))


def test_a_model_with_many_tensors_shares_the_cache_too(tmp_path):
    """A 48-layer MoE lists ~340 repacked tensors (~5 KB, over the cache header's key room): the long
    tensor list is keyed by its digest, so such models still build and map one shared file."""
    from tiny_gguf import TinyConfig, write_tiny_gguf

    path = tmp_path / "deep.gguf"
    write_tiny_gguf(path, TinyConfig(arch="llama", n_layer=200))  # 1400 repacked matrices
    first = load(path, tmp_path / "cache")
    assert first.repack_status.startswith("built "), first.repack_status
    second = load(path, tmp_path / "cache")
    assert second.repack_status.startswith("mapped "), second.repack_status
    ids = [72, 101, 108, 108, 111]
    assert np.array_equal(first.logits(ids), second.logits(ids))
