import hashlib
import os
import sys
from pathlib import Path

import pytest

# importlib import mode: make this folder's helper module (mmproj_gguf) importable.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import mmproj_gguf  # noqa: E402
from reference import REF  # noqa: E402


@pytest.fixture(scope="session")
def mmproj_files(tmp_path_factory):
    """The reference's random-weight projectors, regenerated and checked byte for byte."""
    d = tmp_path_factory.mktemp("mmproj")
    out = {}
    for name, spec in mmproj_gguf.SPECS.items():
        path = mmproj_gguf.write_mmproj(d / f"{name}.gguf", spec)
        assert hashlib.sha256(path.read_bytes()).hexdigest() == REF["projectors"][name]["mmproj_sha256"], \
            "the generator no longer writes the file the reference was made from"
        out[name] = path
    return out


@pytest.fixture(scope="session")
def text_models(tmp_path_factory):
    """Text model per projector: Gemma 3 270M, and a copy of SmolLM2-135M whose vocabulary gains SmolVLM's
    image markers (checked against the reference's copy)."""
    import lanes
    path = tmp_path_factory.mktemp("smollm2-vlm") / "smollm2-vlm.gguf"
    mmproj_gguf.add_vocab_tokens(Path(lanes.smollm2_path()), path, mmproj_gguf.IDEFICS3_TOKENS)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == REF["projectors"]["idefics3"]["text_sha256"]
    return {"gemma3": Path(lanes.gemma3_path()), "idefics3": path}


@pytest.fixture(scope="module")
def runtimes(mmproj_files, text_models):
    """Projector name → (the text model as lanes.Model, its native VisionEncoder), both on two threads."""
    from lanes import Model
    from lanes import _runtime as rt
    out = {}
    for name in mmproj_gguf.SPECS:
        model = Model(text_models[name], threads=2, ctx_size=1024)
        enc = rt.VisionEncoder(str(mmproj_files[name]), n_threads=2, text_n_embd=model._engine.n_embd)
        out[name] = (model, enc)
    return out
