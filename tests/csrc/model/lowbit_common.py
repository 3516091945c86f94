"""The tiny low-bit models of tests/data/lowbit (shared by the test and its reference script)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import gguf
import numpy as np
from tiny_gguf import Q, TinyConfig

# 256-wide rows: k-quant and IQ4_XS super-blocks are 256 elements (narrower rows would fall back).
CONFIG = TinyConfig(arch="llama", n_layer=2, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=256,
                    weight_type=Q.F32, embd_type=Q.F32, tied=True, tokenizer_pre="smollm")
SEED = 27
# file name -> llama.cpp file type (llama_cpp.LLAMA_FTYPE_MOSTLY_*)
TYPES = {
    "tiny-q2_k": "LLAMA_FTYPE_MOSTLY_Q2_K",
    "tiny-q3_k_m": "LLAMA_FTYPE_MOSTLY_Q3_K_M",
    "tiny-iq4_nl": "LLAMA_FTYPE_MOSTLY_IQ4_NL",
    "tiny-iq4_xs": "LLAMA_FTYPE_MOSTLY_IQ4_XS",
}
IDS = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 10, 84, 104, 101, 32, 113, 117,
       105, 99, 107, 32]


def file_weights(path: Path) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """float64 weights of a GGUF (dequantized by the gguf package) and a count of its tensor types."""
    r = gguf.GGUFReader(str(path))
    weights, types = {}, Counter()
    for t in r.tensors:
        shape = tuple(int(v) for v in reversed(t.shape))  # ggml ne is innermost-first
        w = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float64)
        weights[t.name] = w.reshape(shape) if len(shape) > 1 else w.reshape(-1)
        types[t.tensor_type.name] += 1
    return weights, dict(sorted(types.items()))
