"""The served facts of models loaded on demand, known before their lanes ever start.

A --models-dir model is registered at start from its GGUF alone (tokenizer, chat template,
embedding width: ~0.1-0.3 s each, in the start-up thread that overlaps the eager lanes' loading):
requests are tokenized and checked before its lanes load. A file that cannot be read is kept
aside with its error: a request for it gets that error (503 model_load_failed) and no other model
is affected; the next request after the file changed (size or mtime) reads it again.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from gateway.http.errors import load_failed
from gateway.server.state import ServedModel


def _file_key(path: str) -> tuple:
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return (st.st_size, st.st_mtime_ns)


def read_served(name: str, path: str, ctx_size: int, num_slots: int, created_s: int) -> ServedModel:
    """A ServedModel from the GGUF file alone; raises (ValueError and kin) for a broken file."""
    from gateway.text.model_text import ModelText
    from lanes._runtime import GgufFile  # native; imported here so other modules need no build

    text = ModelText(path)
    arch = text.architecture
    n_embd = GgufFile(path).get(f"{arch}.embedding_length") if arch else None
    return ServedModel(name=name, path=path, text=text, n_ctx=ctx_size, n_vocab=text.n_vocab, created_s=created_s,
                       num_slots=num_slots, n_embd=n_embd if isinstance(n_embd, int) else 0)


@dataclass
class OnDemandModels:
    """--models-dir's models: {name: path}, and those whose file could not be read."""
    paths: dict[str, str]
    ctx_size: int
    slots: dict[str, int]                                # sequence slots per lane, by model
    served: dict[str, ServedModel] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)  # name → why its file cannot be read
    _broken_keys: dict[str, tuple] = field(default_factory=dict)

    def read_all(self, created_s: int) -> None:
        for name, path in self.paths.items():
            self._read(name, path, created_s)

    def _read(self, name: str, path: str, created_s: int) -> ServedModel | None:
        try:
            served = read_served(name, path, self.ctx_size, self.slots[name], created_s)
        except Exception as exc:  # the native reader's GgufError is a ValueError; keep any reason
            self.broken[name] = str(exc) or type(exc).__name__
            self._broken_keys[name] = _file_key(path)
            return None
        self.broken.pop(name, None)
        self._broken_keys.pop(name, None)
        self.served[name] = served
        return served

    def retry(self, name: str, created_s: int) -> ServedModel:
        """A broken model asked for again: read its file if it changed, else its error (APIError)."""
        path = self.paths[name]
        if _file_key(path) != self._broken_keys.get(name):
            served = self._read(name, path, created_s)
            if served is not None:
                return served
        raise load_failed(name, self.broken[name])
