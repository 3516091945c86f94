"""Random-weight vision projectors (mmproj GGUF) as llama.cpp's converter writes them, the SmolLM2 copy whose
vocabulary gains SmolVLM's image marker tokens, and the procedural test images.

Needs only numpy and gguf, so the same code runs in the test environment and in the llama.cpp environment that
makes the reference data (tests/data/vision/make_reference.py); the reference records each file's sha256 and the
tests check theirs against it, so both sides are known to use the same bytes.

Weights: matrices N(0, 1/n_in) stored F16 (patch embedding included), norms 1 + N(0, 0.1²) and biases
N(0, 0.02²) in F32, position embeddings N(0, 0.1²) F32 — activations stay O(1) through the blocks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType


@dataclass(frozen=True)
class MmprojSpec:
    projector: str          # "gemma3" | "idefics3"
    image_size: int
    patch_size: int
    n_embd_out: int         # the paired text model's n_embd
    merge: int              # gemma3: pooling kernel; idefics3: pixel-shuffle factor
    n_embd: int = 128
    n_ff: int = 256
    n_layer: int = 3
    n_head: int = 4
    longest_edge: int = 0   # idefics3: clip.vision.preproc_image_size
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    matrix_type: Q = Q.F16
    eps: float = 1e-6
    seed: int = 0


SPECS = {
    # 12×12 patches pooled 2×2 → 36 embeddings; Gemma 3 270M's n_embd.
    "gemma3": MmprojSpec("gemma3", image_size=96, patch_size=8, n_embd_out=640, merge=2, seed=1),
    # 8×8 patches per 128-px tile, shuffled 2×2 → 16 embeddings per tile; SmolLM2-135M's n_embd; CLIP mean/std.
    "idefics3": MmprojSpec("idefics3", image_size=128, patch_size=16, n_embd_out=576, merge=2, longest_edge=384,
                           mean=(0.48145466, 0.4578275, 0.40821073), std=(0.26862954, 0.26130258, 0.27577711),
                           seed=2),
}

# SmolVLM's image markers, which stock SmolLM2 lacks (llama.cpp's mtmd looks each one up in the vocabulary).
IDEFICS3_TOKENS = (["<fake_token_around_image>", "<global-img>", "<image>"]
                   + [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)])


def _matrix(rng: np.random.Generator, n_out: int, n_in: int) -> np.ndarray:
    return (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)


def _store(w: gguf.GGUFWriter, name: str, arr: np.ndarray, qtype: Q) -> None:
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if qtype == Q.F32:
        w.add_tensor(name, arr)
    elif qtype == Q.F16:
        w.add_tensor(name, arr.astype(np.float16))
    else:
        w.add_tensor(name, gguf.quants.quantize(arr, qtype), raw_shape=arr.shape, raw_dtype=qtype)


def write_mmproj(path: Path, spec: MmprojSpec) -> Path:
    """Writes the projector deterministically from spec (same bytes for the same spec)."""
    rng = np.random.default_rng(spec.seed)
    d, p, n_side = spec.n_embd, spec.patch_size, spec.image_size // spec.patch_size
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_string("general.type", "mmproj")
    w.add_string("clip.projector_type", spec.projector)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", spec.image_size)
    w.add_uint32("clip.vision.patch_size", p)
    w.add_uint32("clip.vision.embedding_length", d)
    w.add_uint32("clip.vision.feed_forward_length", spec.n_ff)
    w.add_uint32("clip.vision.block_count", spec.n_layer)
    w.add_uint32("clip.vision.projection_dim", spec.n_embd_out)
    w.add_uint32("clip.vision.attention.head_count", spec.n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", spec.eps)
    w.add_array("clip.vision.image_mean", list(spec.mean))
    w.add_array("clip.vision.image_std", list(spec.std))
    w.add_uint32("clip.vision.projector.scale_factor", spec.merge)
    if spec.longest_edge:
        w.add_uint32("clip.vision.preproc_image_size", spec.longest_edge)

    def vec(n: int, base: float, scale: float) -> np.ndarray:
        return (base + scale * rng.standard_normal(n)).astype(np.float32)

    mt = spec.matrix_type
    patch = (rng.standard_normal((d, 3, p, p)) / np.sqrt(3 * p * p)).astype(np.float32)
    _store(w, "v.patch_embd.weight", patch, Q.F16)  # F16 as the converter writes it (and ggml's im2col needs)
    _store(w, "v.patch_embd.bias", vec(d, 0.0, 0.02), Q.F32)
    _store(w, "v.position_embd.weight", vec(n_side * n_side * d, 0.0, 0.1).reshape(n_side * n_side, d), Q.F32)
    for il in range(spec.n_layer):
        pre = f"v.blk.{il}."
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            _store(w, pre + name + ".weight", _matrix(rng, d, d), mt)
            _store(w, pre + name + ".bias", vec(d, 0.0, 0.02), Q.F32)
        for name in ("ln1", "ln2"):
            _store(w, pre + name + ".weight", vec(d, 1.0, 0.1), Q.F32)
            _store(w, pre + name + ".bias", vec(d, 0.0, 0.02), Q.F32)
        _store(w, pre + "ffn_up.weight", _matrix(rng, spec.n_ff, d), mt)
        _store(w, pre + "ffn_up.bias", vec(spec.n_ff, 0.0, 0.02), Q.F32)
        _store(w, pre + "ffn_down.weight", _matrix(rng, d, spec.n_ff), mt)
        _store(w, pre + "ffn_down.bias", vec(d, 0.0, 0.02), Q.F32)
    _store(w, "v.post_ln.weight", vec(d, 1.0, 0.1), Q.F32)
    _store(w, "v.post_ln.bias", vec(d, 0.0, 0.02), Q.F32)
    if spec.projector == "gemma3":
        _store(w, "mm.soft_emb_norm.weight", vec(d, 1.0, 0.1), Q.F32)
        # ggml ne = [n_embd_out, n_embd]: llama.cpp multiplies by its transpose.
        _store(w, "mm.input_projection.weight", _matrix(rng, spec.n_embd_out, d).T.copy(), Q.F16)
    else:
        _store(w, "mm.model.fc.weight", _matrix(rng, spec.n_embd_out, d * spec.merge ** 2), mt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def add_vocab_tokens(src: Path, dst: Path, tokens: list[str], token_type: int = 4) -> Path:
    """Copy of the GGUF at src whose vocabulary ends with `tokens` (type 4, user-defined, as llama.cpp's converter
    stores added tokens); token_embd gains as many all-zero rows (zero bytes are zero in every ggml block type)."""
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        val = f.contents()
        if key == "tokenizer.ggml.tokens":
            val = list(val) + list(tokens)
        elif key == "tokenizer.ggml.token_type":
            val = list(val) + [token_type] * len(tokens)
        elif key == "tokenizer.ggml.scores":
            val = list(val) + [0.0] * len(tokens)
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, val, f.types[0], sub)
    for t in r.tensors:
        data = np.asarray(t.data)  # numpy order; quantized types as (rows, row bytes) of uint8
        if t.name == "token_embd.weight":
            data = data.reshape(int(t.shape[1]), -1)
            data = np.concatenate([data, np.zeros((len(tokens), data.shape[1]), data.dtype)])
        w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


@dataclass(frozen=True)
class TestImage:
    name: str
    width: int
    height: int
    seed: int = 0
    note: str = field(default="", compare=False)


# Per projector: sizes and aspect ratios that exercise the resize, letterbox and tiling paths.
IMAGES = {
    "gemma3": [
        TestImage("exact", 96, 96, 11, "already image_size: no resize"),
        TestImage("wide", 200, 120, 12, "letterboxed top and bottom"),
        TestImage("tall", 40, 150, 13, "letterboxed left and right"),
        TestImage("tiny", 5, 7, 14, "smaller than one patch"),
    ],
    "idefics3": [
        TestImage("square", 384, 384, 21, "already the longest edge: 3×3 tiles, no resize"),
        TestImage("wide", 300, 200, 22, "3×2 tiles"),
        TestImage("tall", 100, 400, 23, "1×3 tiles"),
        TestImage("tiny", 10, 6, 24, "smaller than one patch: upscaled to 3×2 tiles"),
    ],
}


def image_pixels(img: TestImage) -> np.ndarray:
    """uint8 (height, width, 3): smooth per-channel gradients and waves plus noise, so every resampling filter
    and every channel matters."""
    rng = np.random.default_rng(img.seed)
    y, x = np.mgrid[0:img.height, 0:img.width].astype(np.float64)
    u, v = x / max(img.width - 1, 1), y / max(img.height - 1, 1)
    chans = [
        200 * u + 30 * np.sin(9 * v + 1),
        220 * v + 25 * np.cos(7 * u * v * 6),
        128 + 100 * np.sin(5 * u + 4 * v),
    ]
    arr = np.stack(chans, axis=-1) + rng.normal(0, 12, (img.height, img.width, 3))
    return np.clip(np.rint(arr), 0, 255).astype(np.uint8)
