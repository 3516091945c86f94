"""The entries of list settings: `--model NAME=PATH_OR_ALIAS`, `--lora [MODEL:]NAME=PATH`, `--mmproj
NAME=MMPROJ` (gateway.server.config holds them), each validated at construction."""
from __future__ import annotations

import re
from dataclasses import dataclass

# Model names end up in JSON bodies, Prometheus labels and log lines: keep them boring.
MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field."""


@dataclass(frozen=True)
class ModelEntry:
    name: str
    source: str  # a known model's alias (lanes/registry.py), a path, or a synthetic spec

    def __post_init__(self) -> None:
        if not MODEL_NAME_RE.match(self.name):
            raise ConfigError(
                f"model name {self.name!r}: use 1-64 characters of letters, digits, '.', '_', ':', '-'"
            )
        if not self.source:
            raise ConfigError(f"model {self.name}: empty path or alias")


ADAPTER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # a single directory name: no '/', no '..'


def check_adapter_name(name: str, what: str = "LoRA adapter name") -> str:
    if not isinstance(name, str) or not ADAPTER_NAME_RE.match(name) or ".." in name:
        raise ConfigError(f"{what} {name!r}: use 1-64 letters, digits, '.', '_', '-' (a single directory name, "
                          "not a path)")
    return name


@dataclass(frozen=True)
class LoraEntry:
    """`--lora [MODEL:]NAME=PATH`: a GGUF LoRA adapter served as NAME (on MODEL, else on the one
    text model whose architecture it fits)."""
    model: str | None
    name: str
    path: str

    def __post_init__(self) -> None:
        check_adapter_name(self.name)
        if not self.path:
            raise ConfigError(f"LoRA adapter {self.name}: empty path")


def parse_lora_arg(text: str) -> LoraEntry:
    head, sep, path = text.strip().partition("=")
    if not sep:
        raise ConfigError(f"--lora {text!r}: expected NAME=PATH or MODEL:NAME=PATH")
    model, colon, name = head.strip().rpartition(":")
    return LoraEntry(model if colon else None, name, path.strip())


def parse_model_arg(text: str) -> ModelEntry:
    """`NAME=PATH_OR_ALIAS`, or a bare alias/path (the name is then the alias or the file stem)."""
    text = text.strip()
    if "=" in text:
        name, source = text.split("=", 1)
        return ModelEntry(name.strip(), source.strip())
    if "/" in text or text.endswith(".gguf"):
        stem = text.rstrip("/").rsplit("/", 1)[-1]
        stem = stem[: -len(".gguf")] if stem.endswith(".gguf") else stem
        return ModelEntry(stem, text)
    return ModelEntry(text, text)


@dataclass(frozen=True)
class MmprojEntry:
    """`--mmproj NAME=MMPROJ_GGUF`: the vision projector (llama.cpp's mmproj format) of the served text model NAME;
    its requests may then carry images (gateway/vision/)."""
    model: str
    path: str

    def __post_init__(self) -> None:
        if not MODEL_NAME_RE.match(self.model):
            raise ConfigError(f"--mmproj {self.model!r}: NAME must be a served model's name")
        if not self.path:
            raise ConfigError(f"--mmproj {self.model}: empty path")


def parse_mmproj_arg(text: str) -> MmprojEntry:
    name, sep, path = text.strip().partition("=")
    if not sep:
        raise ConfigError(f"--mmproj {text!r}: expected NAME=MMPROJ_GGUF (NAME: a --model name)")
    return MmprojEntry(name.strip(), path.strip())
