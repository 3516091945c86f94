"""Tiny random-weight GGUF models (llama, qwen2, qwen3, gemma3, …; MoE parts in tiny_moe.py) and a float64 numpy reference.

Optional parts: biases, Llama 3 rope frequency factors, linear and YaRN rope scaling (the
reference follows llama.cpp's definitions of each, see rope_cos_sin).

The reference dequantizes the very same weights with `gguf.quants` and runs the llama / qwen2 / qwen3 /
gemma3 forward passes (as model.cpp documents them) in float64, so any structural mistake in the runtime (RoPE style, GQA mapping,
norm placement, biases, sliding window) shows as an O(1) difference, while the runtime's int8
activation quantization only adds noise of about 1%.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from tiny_moe import add_moe_tensors, moe_ffn_reference
from tiny_writer import GRANITE_SCALES, finish_writer, start_writer, tensor_adder

Q = gguf.GGMLQuantizationType


@dataclass(frozen=True)
class TinyConfig:
    arch: str = "llama"
    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 96
    eps: float = 1e-5
    rope_base: float = 10000.0
    sliding_window: int = 4  # gemma3 only: tiny so the window matters in short tests
    weight_type: Q = Q.Q8_0
    embd_type: Q = Q.Q8_0
    tied: bool = True
    n_ctx_train: int = 256
    tokenizer_pre: str = "gpt2"  # llama.cpp rejects "gpt2"; files it must load use "smollm"
    chat_template: str | None = None  # tokenizer.chat_template
    output_std: float = 0.2  # untied LM head: larger values give larger logit margins (decisive greedy steps)
    # Optional tensors (llama.cpp reads attention-output/FFN biases and rope_freqs for llama only,
    # the LM head bias for qwen2 only; qwen2 files always carry q/k/v biases).
    attn_bias: bool = False  # attn_{q,k,v,output}.bias
    ffn_bias: bool = False  # ffn_{gate,up,down}.bias
    output_bias: bool = False  # output.bias
    extra_tensors: tuple[str, ...] = ()  # unknown names, [32] F32 zeros: the loader must refuse them
    # RoPE scaling. rope_freqs: Llama 3 frequency factors as convert_hf_to_gguf.py computes them
    # (factor 8, low/high frequency factors 1/4, original context llama3_orig_ctx).
    rope_freqs: bool = False
    llama3_orig_ctx: int = 64
    rope_scaling: str | None = None  # rope.scaling.type key ("none" | "linear" | "yarn"); None = absent
    rope_factor: float = 0.0  # rope.scaling.factor; 0 = absent
    rope_orig_ctx: int = 0  # rope.scaling.original_context_length; 0 = absent
    rope_attn_factor: float | None = None  # rope.scaling.attn_factor; None = absent
    # Mixture of experts (tiny_moe.py; arch qwen3moe, or llama for Mixtral): n_expert > 0 replaces
    # every FFN by a router and n_expert experts of which n_expert_used run per token.
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0  # qwen3moe's expert_feed_forward_length (llama's experts are n_ff wide)
    expert_type: Q | None = None  # the expert tensors' type (None: weight_type)
    moe_kv: tuple[tuple[str, object], ...] = ()  # extra {arch}.KEY values (loader tests)
    drop_tensors: tuple[str, ...] = ()  # names not written (loader tests)


def write_tiny_gguf(path: Path, cfg: TinyConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Writes the file; returns the float64 dequantized weights by tensor name."""
    if cfg.arch == "gpt-oss":
        from tiny_gptoss import write_gptoss_gguf

        return write_gptoss_gguf(path, cfg, seed)
    rng = np.random.default_rng(seed)
    w, n_vocab = start_writer(path, cfg)
    a = cfg.arch
    weights: dict[str, np.ndarray] = {}
    add = tensor_adder(w, cfg, weights)

    E, hd = cfg.n_embd, cfg.head_dim
    qd, kvd = cfg.n_head * hd, cfg.n_head_kv * hd
    norm = (lambda n: 1.0 + 0.1 * rng.standard_normal(n))
    add("token_embd.weight", rng.standard_normal((n_vocab, E)) * 0.5, cfg.embd_type)
    if not cfg.tied:
        add("output.weight", rng.standard_normal((n_vocab, E)) * cfg.output_std, cfg.weight_type)
    add("output_norm.weight", norm(E), Q.F32)
    if cfg.output_bias:
        add("output.bias", 0.5 * rng.standard_normal(n_vocab), Q.F32)
    if cfg.rope_freqs:
        add("rope_freqs.weight", llama3_rope_factors(cfg), Q.F32)
    for name in cfg.extra_tensors:
        add(name, np.zeros(32), Q.F32)
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        if a != "olmo2":  # olmo2 has no pre-norms, only the post-norms
            add(p + "attn_norm.weight", norm(E), Q.F32)
            add(p + "ffn_norm.weight", norm(E), Q.F32)
        if a == "phi3":  # fused: q|k|v rows in one matrix, gate|up rows in ffn_up
            add(p + "attn_qkv.weight", rng.standard_normal((qd + 2 * kvd, E)) / np.sqrt(E), cfg.weight_type)
        else:
            add(p + "attn_q.weight", rng.standard_normal((qd, E)) / np.sqrt(E), cfg.weight_type)
            add(p + "attn_k.weight", rng.standard_normal((kvd, E)) / np.sqrt(E), cfg.weight_type)
            add(p + "attn_v.weight", rng.standard_normal((kvd, E)) / np.sqrt(E), cfg.weight_type)
        add(p + "attn_output.weight", rng.standard_normal((E, qd)) / np.sqrt(qd), cfg.weight_type)
        if cfg.n_expert:
            add_moe_tensors(add, rng, cfg, p)
        elif a == "phi3":
            add(p + "ffn_up.weight", rng.standard_normal((2 * cfg.n_ff, E)) / np.sqrt(E), cfg.weight_type)
        else:
            add(p + "ffn_gate.weight", rng.standard_normal((cfg.n_ff, E)) / np.sqrt(E), cfg.weight_type)
            add(p + "ffn_up.weight", rng.standard_normal((cfg.n_ff, E)) / np.sqrt(E), cfg.weight_type)
        if not cfg.n_expert:
            add(p + "ffn_down.weight", rng.standard_normal((E, cfg.n_ff)) / np.sqrt(cfg.n_ff), cfg.weight_type)
        if a == "qwen2" or cfg.attn_bias:
            add(p + "attn_q.bias", 0.1 * rng.standard_normal(qd), Q.F32)
            add(p + "attn_k.bias", 0.1 * rng.standard_normal(kvd), Q.F32)
            add(p + "attn_v.bias", 0.1 * rng.standard_normal(kvd), Q.F32)
        if cfg.attn_bias:
            add(p + "attn_output.bias", 0.3 * rng.standard_normal(E), Q.F32)
        if cfg.ffn_bias:
            add(p + "ffn_gate.bias", 0.3 * rng.standard_normal(cfg.n_ff), Q.F32)
            add(p + "ffn_up.bias", 0.3 * rng.standard_normal(cfg.n_ff), Q.F32)
            add(p + "ffn_down.bias", 0.3 * rng.standard_normal(E), Q.F32)
        if a in ("qwen3", "qwen3moe", "gemma3"):
            add(p + "attn_q_norm.weight", norm(hd), Q.F32)
            add(p + "attn_k_norm.weight", norm(hd), Q.F32)
        if a == "olmo2":  # q/k norms over the whole projection, not per head
            add(p + "attn_q_norm.weight", norm(qd), Q.F32)
            add(p + "attn_k_norm.weight", norm(kvd), Q.F32)
        if a in ("gemma3", "olmo2"):
            add(p + "post_attention_norm.weight", norm(E), Q.F32)
            add(p + "post_ffw_norm.weight", norm(E), Q.F32)
    finish_writer(w)
    return weights


def llama3_rope_factors(cfg: TinyConfig) -> np.ndarray:
    """rope_freqs.weight as convert_hf_to_gguf.py derives it from a Llama 3.x rope_scaling config:
    1 for high frequencies, `factor` for low ones, a smooth blend between the two wavelengths."""
    factor, low_freq_factor, high_freq_factor, old_ctx = 8.0, 1.0, 4.0, cfg.llama3_orig_ctx
    freqs = 1.0 / (cfg.rope_base ** (np.arange(0, cfg.head_dim, 2, dtype=np.float32) / cfg.head_dim))
    low_wavelen, high_wavelen = old_ctx / low_freq_factor, old_ctx / high_freq_factor
    out = []
    for freq in freqs:
        wavelen = 2 * np.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out)


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def yarn_corr_dims(n_rot: int, n_ctx_orig: int, base: float, beta_fast: float, beta_slow: float) -> tuple[float, float]:
    """ggml_rope_yarn_corr_dims, in float32 as ggml computes it: the rotary pairs whose wavelength
    fits beta_fast (lo) / beta_slow (hi) times into the original context."""
    f = np.float32

    def dim(n_rotations: float) -> np.float32:
        return f(n_rot) * np.log(f(n_ctx_orig) / (f(n_rotations) * f(2) * f(np.pi))) / (f(2) * np.log(f(base)))

    return max(0.0, float(np.floor(dim(beta_fast)))), min(float(n_rot - 1), float(np.ceil(dim(beta_slow))))


def rope_cos_sin(cfg: TinyConfig, W: dict[str, np.ndarray], pos: np.ndarray, base: float, local: bool):
    """cos/sin [n, hd/2] of every rotary pair, with llama.cpp's rope scaling: frequency factors
    divide the frequencies; llama_context resolves the keys (absent type = linear, factor 0 = 1;
    yarn: ext_factor 1, beta_fast 32, beta_slow 1, attn_factor = mscale(factor) / (1 + 0.1 ln
    factor) × rope.scaling.attn_factor); ggml's rope_yarn mixes interpolated and extrapolated
    angles along the ramp and multiplies cos and sin by the magnitude scale. SWA layers keep
    freq_scale 1 (gemma3)."""
    half = cfg.head_dim // 2
    i = np.arange(half)
    freq = base ** (-2.0 * i / cfg.head_dim)
    if "rope_freqs.weight" in W and not local:
        freq = freq / W["rope_freqs.weight"]
    kind = cfg.rope_scaling or "linear"
    freq_scale = 1.0 if kind == "none" or cfg.rope_factor == 0 else 1.0 / cfg.rope_factor
    ext_factor = 1.0 if kind == "yarn" else 0.0
    attn_factor = 1.0
    if ext_factor:
        factor = 1.0 / freq_scale
        attn_factor = (1.0 if factor <= 1 else 0.1 * np.log(factor) + 1.0) / (1.0 + 0.1 * np.log(factor))
    if cfg.rope_attn_factor is not None:
        attn_factor *= cfg.rope_attn_factor
    if local:
        freq_scale = 1.0
    extrap = pos[:, None] * freq[None, :]
    interp = freq_scale * extrap
    if ext_factor:
        lo, hi = yarn_corr_dims(cfg.head_dim, cfg.rope_orig_ctx or cfg.n_ctx_train, base, 32.0, 1.0)
        mix = (1.0 - np.clip((i - lo) / max(0.001, hi - lo), 0.0, 1.0)) * ext_factor
        theta = interp * (1 - mix) + extrap * mix
        mscale = attn_factor * (1.0 + 0.1 * np.log(1.0 / freq_scale))
    else:
        theta, mscale = interp, attn_factor
    return np.cos(theta) * mscale, np.sin(theta) * mscale


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, neox: bool) -> np.ndarray:
    """x [n, heads, hd]; rotates all hd dims by cos/sin [n, hd/2]."""
    half = x.shape[-1] // 2
    cos, sin = cos[:, None, :], sin[:, None, :]
    out = x.copy()
    if neox:
        x0, x1 = x[..., :half], x[..., half:]
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:] = x0 * sin + x1 * cos
    else:
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
    return out


def reference_logits(cfg: TinyConfig, W: dict[str, np.ndarray], ids: list[int], ffn_inputs: list | None = None) -> np.ndarray:
    """float64 forward pass; returns [len(ids), n_vocab] logits (and appends each layer's FFN input
    [len(ids), n_embd] to ffn_inputs when given)."""
    if cfg.arch == "gpt-oss":
        from tiny_gptoss import gptoss_reference_logits

        return gptoss_reference_logits(cfg, W, ids, ffn_inputs)
    if cfg.arch == "phi3":
        W = _unfuse_phi3(cfg, W)
    n, E, hd = len(ids), cfg.n_embd, cfg.head_dim
    gemma = cfg.arch == "gemma3"
    granite = cfg.arch == "granite"
    olmo2 = cfg.arch == "olmo2"
    gs = GRANITE_SCALES if granite else {"embedding": 1.0, "residual": 1.0, "attention": 1 / np.sqrt(hd), "logit": 1.0}
    neox = cfg.arch not in ("llama", "granite", "smollm3")
    emb = W["token_embd.weight"]
    x = emb[ids] * (np.sqrt(E) if gemma else gs["embedding"])
    pos = np.arange(n, dtype=np.float64)
    group = cfg.n_head // cfg.n_head_kv
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        h = _rms(x, W[p + "attn_norm.weight"], cfg.eps) if not olmo2 else x
        q = h @ W[p + "attn_q.weight"].T
        k = h @ W[p + "attn_k.weight"].T
        v = h @ W[p + "attn_v.weight"].T
        if p + "attn_q.bias" in W:
            q, k, v = q + W[p + "attn_q.bias"], k + W[p + "attn_k.bias"], v + W[p + "attn_v.bias"]
        if olmo2:
            q, k = _rms(q, W[p + "attn_q_norm.weight"], cfg.eps), _rms(k, W[p + "attn_k_norm.weight"], cfg.eps)
        q = q.reshape(n, cfg.n_head, hd)
        k = k.reshape(n, cfg.n_head_kv, hd)
        v = v.reshape(n, cfg.n_head_kv, hd)
        if cfg.arch in ("qwen3", "qwen3moe", "gemma3"):
            q = _rms(q, W[p + "attn_q_norm.weight"], cfg.eps)
            k = _rms(k, W[p + "attn_k_norm.weight"], cfg.eps)
        local = gemma and il % 6 != 5
        base = 10000.0 if local else cfg.rope_base
        cos, sin = rope_cos_sin(cfg, W, pos, base, local)
        if not (cfg.arch == "smollm3" and (il + 1) % 4 == 0):  # smollm3: every 4th layer has no RoPE
            q, k = _rope(q, cos, sin, neox), _rope(k, cos, sin, neox)
        out = np.zeros((n, cfg.n_head, hd))
        for t in range(n):
            lo = max(0, t - cfg.sliding_window + 1) if local else 0
            for hh in range(cfg.n_head):
                kv = hh // group
                s = k[lo : t + 1, kv] @ q[t, hh] * gs["attention"]
                s = np.exp(s - s.max())
                out[t, hh] = (s / s.sum()) @ v[lo : t + 1, kv]
        o = out.reshape(n, -1) @ W[p + "attn_output.weight"].T + W.get(p + "attn_output.bias", 0.0)
        if gemma or olmo2:
            o = _rms(o, W[p + "post_attention_norm.weight"], cfg.eps)
        x = x + o * gs["residual"]
        h = x if olmo2 else _rms(x, W[p + "ffn_norm.weight"], cfg.eps)
        if ffn_inputs is not None:
            ffn_inputs.append(h)
        if cfg.n_expert:
            d = moe_ffn_reference(cfg, W, p, h)
        else:
            g = h @ W[p + "ffn_gate.weight"].T + W.get(p + "ffn_gate.bias", 0.0)
            u = h @ W[p + "ffn_up.weight"].T + W.get(p + "ffn_up.bias", 0.0)
            if gemma:
                act = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g**3)))
            else:
                act = g / (1 + np.exp(-g))
            d = (act * u) @ W[p + "ffn_down.weight"].T + W.get(p + "ffn_down.bias", 0.0)
        if gemma or olmo2:
            d = _rms(d, W[p + "post_ffw_norm.weight"], cfg.eps)
        x = x + d * gs["residual"]
    x = _rms(x, W["output_norm.weight"], cfg.eps)
    head = W.get("output.weight", emb)
    return (x @ head.T + W.get("output.bias", 0.0)) / gs["logit"]


def _unfuse_phi3(cfg: TinyConfig, W: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """phi3's fused attn_qkv / ffn_up (gate rows first, as ggml_swiglu splits) as separate matrices."""
    W = dict(W)
    qd, kvd = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        qkv, gu = W.pop(p + "attn_qkv.weight"), W.pop(p + "ffn_up.weight")
        W[p + "attn_q.weight"], W[p + "attn_k.weight"], W[p + "attn_v.weight"] = qkv[:qd], qkv[qd:qd + kvd], qkv[qd + kvd:]
        W[p + "ffn_gate.weight"], W[p + "ffn_up.weight"] = gu[:cfg.n_ff], gu[cfg.n_ff:]
    return W


def relative_error(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))


def runtime_and_reference(path: Path, cfg: TinyConfig, seed: int, ids: list[int]):
    """Writes the tiny model, runs the runtime's batched forward over `ids` (2 threads, context
    64) and the float64 reference; returns (ours, ref, weights), logits as float64 [n, n_vocab]."""
    # The native runtime, imported here: the writer and the reference do not need it.
    from lanes import Model

    weights = write_tiny_gguf(path, cfg, seed=seed)
    ref = reference_logits(cfg, weights, ids)
    ours = Model(path, threads=2, ctx_size=64).logits(ids).astype(np.float64)
    assert ours.shape == ref.shape
    return ours, ref, weights
