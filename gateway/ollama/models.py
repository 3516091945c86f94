"""What /api/tags, /api/show and /api/ps say about a served model, read once from its GGUF:
family, parameter count, quantization, size, sha256 digest (computed on first use), the chat
template, and every scalar metadata key (`model_info`)."""
from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass

# general.file_type → the quantization name Ollama shows (llama.cpp's LLAMA_FTYPE_* order).
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
              11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
              17: "Q5_K_M", 18: "Q6_K", 25: "IQ4_NL", 30: "IQ4_XS", 32: "BF16"}
MAX_INFO_STRING_CHARS = 4096  # model_info holds scalars; long strings (templates) are cut


@dataclass(frozen=True)
class ModelFacts:
    path: str
    family: str
    parameter_count: int
    quantization: str
    size_bytes: int
    modified_s: float
    template: str
    info: dict

    @property
    def parameter_size(self) -> str:
        n = self.parameter_count
        return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{round(n / 1e6)}M"

    def details(self) -> dict:
        return {"parent_model": "", "format": "gguf", "family": self.family, "families": [self.family],
                "parameter_size": self.parameter_size, "quantization_level": self.quantization}


@functools.lru_cache(maxsize=64)
def model_facts(path: str, template: str) -> ModelFacts:
    from lanes._runtime import GgufFile  # native; imported here so other modules need no build

    f = GgufFile(path)
    arch = f.get("general.architecture") or "unknown"
    count = 0
    for t in f.tensors():
        n = 1
        for d in t["shape"]:
            n *= d
        count += n
    info = {}
    for key in f.keys():
        value = f.get(key)
        if isinstance(value, list):
            info[key] = None  # arrays (vocabularies) are left out, as Ollama does
        elif isinstance(value, str):
            info[key] = value[:MAX_INFO_STRING_CHARS]
        else:
            info[key] = value
    info["general.parameter_count"] = count
    ftype = f.get("general.file_type")
    stat = os.stat(path)
    return ModelFacts(path=path, family=arch, parameter_count=count,
                      quantization=FILE_TYPES.get(ftype, "unknown") if isinstance(ftype, int) else "unknown",
                      size_bytes=stat.st_size, modified_s=stat.st_mtime, template=template, info=info)


@functools.lru_cache(maxsize=64)
def digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
