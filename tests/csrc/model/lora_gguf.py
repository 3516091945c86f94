"""Random-weight LoRA adapters written as llama.cpp's converter writes them, and float64 references.

An adapter is generated deterministically from its AdapterSpec (seed included) against a base GGUF:
for each targeted base weight W (numpy [n_out, n_in]) A ~ N(0, 1/n_in) [r, n_in] and B [n_out, r] is
scaled so that ‖s·B·A‖_F = rel_norm·‖W‖_F at scale 1 (s = alpha/r): 0.1 on every matrix changes
greedy outputs of the real models while keeping them fluent-ish (0.3 turns SmolLM2 to gibberish).
Files: general.type "adapter", adapter.type "lora", adapter.lora.alpha, the base's architecture;
`<name>.lora_a` numpy [r, n_in] (ggml ne [n_in, r]) and `<name>.lora_b` numpy [n_out, r]; for
token_embd the halves are swapped: lora_a numpy [n_vocab, r], lora_b numpy [n_embd, r].
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType
ATTENTION = ("attn_q", "attn_k", "attn_v", "attn_output")
ALL_MATRICES = ATTENTION + ("ffn_gate", "ffn_up", "ffn_down")


@dataclass(frozen=True)
class AdapterSpec:
    rank: int = 8
    targets: tuple[str, ...] = ALL_MATRICES  # per-layer base tensors (blk.L.<target>.weight)
    layers: tuple[int, ...] | None = None    # None: every layer
    a_type: Q = Q.F32
    b_type: Q = Q.F32                        # the converter writes F16 where Q8_0 cannot hold rank-wide rows
    alpha: float = 16.0
    rel_norm: float = 0.1
    seed: int = 0
    zero_b: bool = False                     # B = 0: must reproduce the base exactly
    token_embd: bool = False
    output: bool = False                     # needs an untied base (output.weight)


def read_base(path: Path) -> tuple[str, dict[str, gguf.ReaderTensor]]:
    r = gguf.GGUFReader(str(path))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    return arch, {t.name: t for t in r.tensors}


def dequantized(t: gguf.ReaderTensor) -> np.ndarray:
    """numpy [ne1, ne0] float64 (a 1-D tensor: [ne0])."""
    w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
    return w.reshape(-1) if len(t.shape) == 1 else w.reshape(int(t.shape[1]), int(t.shape[0]))


def _quantize(arr: np.ndarray, qtype: Q) -> tuple[np.ndarray, np.ndarray]:
    """(data to write, its float64 dequantized value)."""
    arr = arr.astype(np.float32)
    if qtype == Q.F32:
        return arr, arr.astype(np.float64)
    data = gguf.quants.quantize(arr, qtype)
    return data, gguf.quants.dequantize(data, qtype).astype(np.float64).reshape(arr.shape)


def write_adapter(path: Path, base_path: Path, spec: AdapterSpec, arch: str | None = None,
                  extra_tensors: dict[str, np.ndarray] | None = None,
                  skip: tuple[str, ...] = ()) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Writes the adapter; returns {base tensor name: (A, B)} as float64 numpy arrays of the written
    (quantized) halves, A [r, n_in] and B [n_out, r] (token_embd: A [n_vocab, r], B [n_embd, r]).
    arch overrides the architecture key; extra_tensors are written as given (bad-file tests);
    skip lists tensor names (e.g. "blk.0.attn_q.weight.lora_b") left out of the file."""
    base_arch, tensors = read_base(base_path)
    rng = np.random.default_rng(spec.seed)
    w = gguf.GGUFWriter(str(path), arch or base_arch)
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, spec.alpha)
    s = spec.alpha / spec.rank if spec.alpha else 1.0
    names = []
    n_layer = 1 + max(int(n.split(".")[1]) for n in tensors if n.startswith("blk."))
    for il in (range(n_layer) if spec.layers is None else spec.layers):
        names += [f"blk.{il}.{t}.weight" for t in spec.targets]
    if spec.output:
        names.append("output.weight")
    if spec.token_embd:
        names.append("token_embd.weight")
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in names:
        W = dequantized(tensors[name])
        n_out, n_in = W.shape
        embd = name == "token_embd.weight"
        # Matrices: delta = B @ A [n_out, n_in]. token_embd: delta row of token t = B @ A[t].
        a = rng.standard_normal((n_out, spec.rank) if embd else (spec.rank, n_in)) / np.sqrt(
            spec.rank if embd else n_in)
        b = rng.standard_normal((n_in if embd else n_out, spec.rank)) / np.sqrt(spec.rank)
        delta = a @ b.T if embd else b @ a
        b *= spec.rel_norm * np.linalg.norm(W) / (s * np.linalg.norm(delta))
        if spec.zero_b:
            b[:] = 0.0
        a_data, a_val = _quantize(a, spec.a_type)
        b_data, b_val = _quantize(b, spec.b_type)
        for suffix, data, qtype in ((".lora_a", a_data, spec.a_type), (".lora_b", b_data, spec.b_type)):
            if name + suffix not in skip:
                w.add_tensor(name + suffix, data, raw_dtype=None if qtype == Q.F32 else qtype)
        out[name] = (a_val, b_val)
    for name, arr in (extra_tensors or {}).items():
        w.add_tensor(name, arr.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def merged_weights(W: dict[str, np.ndarray], pairs: list[tuple[dict[str, tuple[np.ndarray, np.ndarray]], float]],
                   spec_alpha: list[float]) -> dict[str, np.ndarray]:
    """W + Σ s·B·A over adapters [(pairs, user scale)] with s = scale·alpha/r (scale when alpha is 0).
    token_embd's delta (A·Bᵀ) changes only the embedding lookup: a tied head keeps the base matrix."""
    out = dict(W)
    if "output.weight" not in out:
        out["output.weight"] = W["token_embd.weight"]
    for (ab, scale), alpha in zip(pairs, spec_alpha):
        for name, (a, b) in ab.items():
            r = b.shape[1]
            s = scale * alpha / r if alpha else scale
            delta = a @ b.T if name == "token_embd.weight" else b @ a
            out[name] = out[name] + s * delta
    return out


GENERATOR_VERSION = 1  # bump when write_adapter's output changes


def cached_adapter(base_path: Path, spec: AdapterSpec) -> Path:
    """write_adapter into a per-user cache keyed by the base file and the spec (adapters of the real
    models take seconds to generate: every targeted base matrix is dequantized for its norm)."""
    import hashlib
    import os
    import tempfile

    st = os.stat(base_path)
    key = f"{GENERATOR_VERSION}|{os.path.abspath(base_path)}|{st.st_size}|{st.st_mtime_ns}|{spec!r}"
    cache = Path(tempfile.gettempdir()) / f"laneserve-lora-{os.getuid()}"
    cache.mkdir(exist_ok=True)
    path = cache / (hashlib.sha256(key.encode()).hexdigest()[:16] + ".gguf")
    if not path.exists():
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        write_adapter(tmp, base_path, spec)
        os.replace(tmp, path)
    return path


# Adapters of the real models whose llama.cpp outputs are stored in tests/data/lora/ (regenerated
# by tests/data/lora/make_reference.py): name → (model, spec, user scale).
REAL_CASES = {
    "smollm2-r16-f16-all": ("smollm2", AdapterSpec(rank=16, a_type=Q.F16, b_type=Q.F16, seed=21), 1.0),
    "smollm2-r64-q8_0-attn": ("smollm2", AdapterSpec(rank=64, targets=ATTENTION, a_type=Q.Q8_0, b_type=Q.Q8_0,
                                                     rel_norm=0.15, seed=22), 0.7),
    "gemma3-r8-f32-all": ("gemma3", AdapterSpec(rank=8, seed=23), 1.0),
    "gemma3-r16-q8_0a-f16b-attn": ("gemma3", AdapterSpec(rank=16, targets=ATTENTION, a_type=Q.Q8_0, b_type=Q.F16,
                                                         rel_norm=0.15, seed=24), 1.0),
}
