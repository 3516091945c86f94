"""The model files of shapes_bench.py: random weights at real model shapes, written as GGUF (F16 for
llama-quantize, or already quantized with the types llama-quantize gives each tensor), cached under a
directory outside the repository.

Shapes: Llama-3.2-1B and -3B, a Qwen3-30B-A3B-shaped MoE, and a gpt-oss-20b-shaped MoE (d 2880, 64/8 heads
of 64, 32 experts of width 2880, 4 used, vocab 201088, attention biases and sinks, a 128-token sliding
window on every other layer, YaRN), the last written as llama-quantize's MXFP4_MOE makes released gpt-oss
files: MXFP4 experts, every other matrix Q8_0 (tests/csrc/model/arch_cases.py checks that
llama-quantize turns a tiny gpt-oss file into exactly these types).
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType


@dataclass(frozen=True)
class Shape:
    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_vocab: int
    tied: bool
    rope_base: float
    llama3_rope: bool = False
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    sliding_window: int = 0  # gpt-oss: on layers 0, 2, …


# Shapes written with one file type only, whatever --quants says.
ONLY_QUANTS = {"gptoss": ["MXFP4_MOE"]}


def shapes(moe_layers: int, gptoss_layers: int) -> dict[str, Shape]:
    return {
        "gptoss": Shape("gpt-oss", gptoss_layers, 2880, 2880, 64, 8, 64, 201088, False, 150000.0,
                        n_expert=32, n_expert_used=4, n_ff_exp=2880, sliding_window=128),
        "1b": Shape("llama", 16, 2048, 8192, 32, 8, 64, 128256, True, 500000.0, llama3_rope=True),
        "3b": Shape("llama", 28, 3072, 8192, 24, 8, 128, 128256, True, 500000.0, llama3_rope=True),
        "moe": Shape("qwen3moe", moe_layers, 2048, 6144, 32, 4, 128, 151936, False, 1000000.0,
                     n_expert=128, n_expert_used=8, n_ff_exp=768),
    }


def llama3_rope_factors(head_dim: int, base: float) -> np.ndarray:
    """rope_freqs.weight for Llama 3.2's rope_scaling (factor 32, low 1, high 4, original context 8192)."""
    factor, low, high, old_ctx = 32.0, 1.0, 4.0, 8192
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    wavelen = 2 * np.pi / freqs
    smooth = np.clip((old_ctx / wavelen - low) / (high - low), 0.0, 1.0)
    return (1.0 / ((1 - smooth) / factor + smooth)).astype(np.float32)


def tensor_specs(s: Shape) -> list[tuple[str, tuple[int, ...], Q]]:
    """(name, numpy shape (outer first), type) of every tensor, in file order."""
    E, qd, kvd = s.n_embd, s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    out = [("token_embd.weight", (s.n_vocab, E), Q.F16), ("output_norm.weight", (E,), Q.F32)]
    if not s.tied:
        out.append(("output.weight", (s.n_vocab, E), Q.F16))
    if s.llama3_rope:
        out.append(("rope_freqs.weight", (s.head_dim // 2,), Q.F32))
    for il in range(s.n_layer):
        p = f"blk.{il}."
        out += [(p + "attn_norm.weight", (E,), Q.F32),
                (p + ("post_attention_norm" if s.arch == "gpt-oss" else "ffn_norm") + ".weight", (E,), Q.F32),
                (p + "attn_q.weight", (qd, E), Q.F16), (p + "attn_k.weight", (kvd, E), Q.F16),
                (p + "attn_v.weight", (kvd, E), Q.F16), (p + "attn_output.weight", (E, qd), Q.F16)]
        if s.arch == "gpt-oss":
            X, F = s.n_expert, s.n_ff_exp
            out += [(p + f"attn_{t}.bias", (n,), Q.F32) for t, n in (("q", qd), ("k", kvd), ("v", kvd), ("output", E))]
            out += [(p + "attn_sinks.weight", (s.n_head,), Q.F32), (p + "ffn_gate_inp.weight", (X, E), Q.F32),
                    (p + "ffn_gate_inp.bias", (X,), Q.F32),
                    (p + "ffn_gate_exps.weight", (X, F, E), Q.F16), (p + "ffn_up_exps.weight", (X, F, E), Q.F16),
                    (p + "ffn_down_exps.weight", (X, E, F), Q.F16), (p + "ffn_gate_exps.bias", (X, F), Q.F32),
                    (p + "ffn_up_exps.bias", (X, F), Q.F32), (p + "ffn_down_exps.bias", (X, E), Q.F32)]
        elif s.arch == "qwen3moe":
            X, F = s.n_expert, s.n_ff_exp
            out += [(p + "attn_q_norm.weight", (s.head_dim,), Q.F32), (p + "attn_k_norm.weight", (s.head_dim,), Q.F32),
                    (p + "ffn_gate_inp.weight", (X, E), Q.F32), (p + "ffn_gate_exps.weight", (X, F, E), Q.F16),
                    (p + "ffn_up_exps.weight", (X, F, E), Q.F16), (p + "ffn_down_exps.weight", (X, E, F), Q.F16)]
        else:
            out += [(p + "ffn_gate.weight", (s.n_ff, E), Q.F16), (p + "ffn_up.weight", (s.n_ff, E), Q.F16),
                    (p + "ffn_down.weight", (E, s.n_ff), Q.F16)]
    return out


def add_keys(w: gguf.GGUFWriter, s: Shape) -> None:
    w.add_block_count(s.n_layer)
    w.add_embedding_length(s.n_embd)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_dimension_count(s.head_dim)
    w.add_context_length(131072 if s.llama3_rope or s.arch == "gpt-oss" else 40960)
    w.add_layer_norm_rms_eps(1e-6 if s.arch == "qwen3moe" else 1e-5)
    w.add_rope_freq_base(s.rope_base)
    if s.sliding_window:  # gpt-oss: YaRN x32 over 4096 positions, as the released files say
        w.add_sliding_window(s.sliding_window)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(32.0)
        w.add_rope_scaling_orig_ctx_len(4096)
    if s.n_expert:
        w.add_expert_count(s.n_expert)
        w.add_expert_used_count(s.n_expert_used)
        w.add_expert_feed_forward_length(s.n_ff_exp)
    # A byte-level BPE vocabulary padded to the model's size with ordinary tokens.
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot|>"]
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra, byte_tokens = 0, []
    for b in range(256):
        byte_tokens.append(chr(b) if b in printable else chr(0x100 + extra))
        extra += b not in printable
    fill = s.n_vocab - 256 - len(specials) - 3
    tokens = byte_tokens + ["Ġt", "he", "Ġthe"] + [f"w{i}" for i in range(fill)] + specials
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre({"llama": "llama-bpe", "gpt-oss": "gpt-4o"}.get(s.arch, "qwen2"))
    w.add_token_list(tokens)
    w.add_token_types([1] * (len(tokens) - len(specials)) + [3] * len(specials))
    w.add_token_merges(["Ġ t", "h e", "Ġt he"])
    w.add_bos_token_id(len(tokens) - 3)
    w.add_eos_token_id(len(tokens) - 2)
    w.add_add_bos_token(False)


def use_more_bits(il: int, n_layer: int) -> bool:
    """llama.cpp's choice of the layers whose attn_v / ffn_down get Q6_K in a Q4_K_M file."""
    return il < n_layer // 8 or il >= 7 * n_layer // 8 or (il - n_layer // 8) % 3 == 2


def file_type(name: str, ftype: str, s: Shape) -> Q:
    """The type llama-quantize gives tensor `name` of a float file quantized to `ftype` (F16: the float file)."""
    if name.endswith(("norm.weight", ".bias")) or name in ("rope_freqs.weight",) or "gate_inp" in name \
            or "attn_sinks" in name:
        return Q.F32
    if ftype == "F16":
        return Q.F16
    if ftype == "MXFP4_MOE":  # experts MXFP4, every other matrix (embeddings and LM head too) Q8_0
        return Q.MXFP4 if "_exps." in name else Q.Q8_0
    if name == "output.weight" or (name == "token_embd.weight" and s.tied):
        return Q.Q6_K
    if ftype == "Q4_0":
        return Q.Q4_0
    il = int(name.split(".")[1]) if name.startswith("blk.") else -1
    if ("attn_v." in name or "ffn_down" in name) and use_more_bits(il, s.n_layer):
        return Q.Q6_K
    return Q.Q4_K


# Random blocks with a small finite scale: (block bytes, offsets of the scale(s)) per type; the scales are
# f16 0.001, MXFP4's one E8M0 byte 2^-7.
_BLOCKS = {Q.Q4_0: (18, (0,)), Q.Q4_K: (144, (0, 2)), Q.Q6_K: (210, (208,)), Q.Q8_0: (34, (0,)), Q.MXFP4: (17, (0,))}


def block_pool(rng: np.random.Generator, qtype: Q, num_blocks: int = 1 << 16) -> np.ndarray:
    size, scale_offsets = _BLOCKS[qtype]
    pool = rng.integers(0, 256, (num_blocks, size), dtype=np.uint8)
    scale = np.array([120], np.uint8) if qtype == Q.MXFP4 else np.frombuffer(np.float16(0.001).tobytes(), np.uint8)
    for off in scale_offsets:
        pool[:, off:off + scale.size] = scale
    return pool.reshape(-1)


def write_gguf(path: Path, s: Shape, ftype: str) -> None:
    """The shape's file with random weights, streamed out one tensor at a time. ftype F16: a float file for
    llama-quantize; Q4_K_M / Q4_0: written already quantized, with llama-quantize's per-tensor types and
    random blocks (the MoE at a size whose F16 intermediate would not fit or take too long to quantize)."""
    rng = np.random.default_rng(0)
    pool = (rng.standard_normal(1 << 24, dtype=np.float32) * 0.02).astype(np.float16)  # 16 Mi values, tiled
    pools = {q: block_pool(rng, q) for q in _BLOCKS} if ftype != "F16" else {}
    specs = [(name, shape, file_type(name, ftype, s)) for name, shape, _ in tensor_specs(s)]
    w = gguf.GGUFWriter(str(path), s.arch)
    add_keys(w, s)
    for name, shape, qtype in specs:
        if qtype in _BLOCKS:
            block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
            byte_shape = (*shape[:-1], shape[-1] // block_values * block_bytes)
            w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), raw_dtype=qtype)
        else:
            dtype = np.dtype(np.float16 if qtype == Q.F16 else np.float32)
            w.add_tensor_info(name, shape, dtype, int(np.prod(shape)) * dtype.itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for i, (name, shape, qtype) in enumerate(specs):
        n = int(np.prod(shape))
        if name == "rope_freqs.weight":
            arr = llama3_rope_factors(s.head_dim, s.rope_base)
        elif "gate_inp" in name:
            arr = pool[:n].astype(np.float32) * 50.0
        elif qtype == Q.F32:
            arr = np.ones(n, dtype=np.float32)
        elif qtype == Q.F16:
            arr = np.resize(np.roll(pool, 977 * i), n)
        else:
            block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
            nbytes = n // block_values * block_bytes
            offset = (i * 7919 % 1024) * block_bytes  # whole blocks, a different start per tensor
            arr = np.resize(np.roll(pools[qtype], -offset), nbytes)
        w.write_tensor_data(arr)
    w.close()


def model_files(s: Shape, name: str, quants: list[str], cache: Path, llama_bin: Path, direct: bool) -> dict[str, Path]:
    cache.mkdir(parents=True, exist_ok=True)
    outs = {q: cache / f"{name}-{s.n_layer}L-{q}{'-direct' if direct else ''}.gguf" for q in quants}
    missing = [q for q, p in outs.items() if not p.exists()]
    for q in missing if direct else ():
        print(f"writing {outs[q]}", flush=True)
        write_gguf(outs[q].with_suffix(".tmp"), s, q)
        outs[q].with_suffix(".tmp").rename(outs[q])
    if missing and not direct:
        f16 = cache / f"{name}-{s.n_layer}L-F16.gguf"
        if not f16.exists():
            print(f"writing {f16}", flush=True)
            write_gguf(f16.with_suffix(".tmp"), s, "F16")
            f16.with_suffix(".tmp").rename(f16)
        for q in missing:
            print(f"quantizing {outs[q].name}", flush=True)
            tmp = outs[q].with_suffix(".tmp")
            quantize(f16, tmp, q, llama_bin)
            tmp.rename(outs[q])
        f16.unlink()
    return outs


def quantize(src: Path, dst: Path, qtype: str, llama_bin: Path) -> None:
    tool = llama_bin / "llama-quantize"
    if tool.exists():
        subprocess.run([str(tool), str(src), str(dst), qtype, "2"], check=True, stdout=subprocess.DEVNULL, timeout=3600)
        return
    import ctypes

    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype}")
    params.nthread = 2
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama_model_quantize {src} -> {dst} failed")
