"""GGUF metadata the gateway needs (chat template, architecture, trained context, BOS/EOS text).

Isolated here until the runtime exposes `lanes._runtime.GgufFile`; switching means changing only
`read_model_meta`. A minimal key/value walker of our own instead of the `gguf` package: that one
parses every tensor and vocabulary entry (21 s for Gemma 3 here) and is only a test dependency.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_WANTED_ARRAYS = ("tokenizer.ggml.tokens",)


@dataclass(frozen=True)
class ModelMeta:
    architecture: str | None
    chat_template: str | None
    context_length: int | None
    bos_token: str
    eos_token: str


class GgufFormatError(ValueError):
    pass


class _Cursor:
    def __init__(self, buf, path: str) -> None:
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise GgufFormatError(f"{self.path}: truncated GGUF metadata")
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.take("<Q")
        if self.pos + n > len(self.buf):
            raise GgufFormatError(f"{self.path}: truncated GGUF string")
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(raw).decode("utf-8", errors="replace")

    def value(self, vtype: int, keep: bool):
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.take("<I"), self.take("<Q")
            if etype in _SCALARS and not keep:
                self.pos += struct.calcsize(_SCALARS[etype]) * count
                return None
            items = [self.value(etype, keep) for _ in range(count)]
            return items if keep else None
        raise GgufFormatError(f"{self.path}: unknown GGUF value type {vtype}")


def read_metadata(path: str) -> dict:
    """Every scalar and string key, plus the token-text array (other arrays are skipped)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size < 24:
            raise GgufFormatError(f"{path}: not a GGUF file (too short)")
        return _walk(f, path)


def _walk(f, path: str) -> dict:
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(memoryview(buf), path)
        try:
            if bytes(buf[:4]) != b"GGUF":
                raise GgufFormatError(f"{path}: not a GGUF file")
            cur.pos = 4
            version = cur.take("<I")
            if version not in (2, 3):
                raise GgufFormatError(f"{path}: unsupported GGUF version {version}")
            cur.take("<Q")  # tensor count
            out = {}
            for _ in range(cur.take("<Q")):
                key = cur.string()
                vtype = cur.take("<I")
                value = cur.value(vtype, keep=key in _WANTED_ARRAYS)
                if value is not None:
                    out[key] = value
            return out
        finally:
            cur.buf.release()


def read_model_meta(path: str) -> ModelMeta:
    meta = read_metadata(path)
    arch = meta.get("general.architecture")
    tokens = meta.get("tokenizer.ggml.tokens") or []

    def token_text(key: str) -> str:
        token_id = meta.get(key)
        return tokens[token_id] if isinstance(token_id, int) and 0 <= token_id < len(tokens) else ""

    context_length = meta.get(f"{arch}.context_length") if arch else None
    return ModelMeta(
        architecture=arch,
        chat_template=meta.get("tokenizer.chat_template"),
        context_length=int(context_length) if context_length is not None else None,
        bos_token=token_text("tokenizer.ggml.bos_token_id"),
        eos_token=token_text("tokenizer.ggml.eos_token_id"),
    )
