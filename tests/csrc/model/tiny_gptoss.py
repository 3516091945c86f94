"""Tiny random-weight gpt-oss GGUFs (tiny_gguf.py's keys and tokenizer) and their float64 reference forward.

gpt-oss as llama.cpp runs it (src/models/openai-moe.cpp): pre-norm attention with q/k/v/output biases,
NeoX RoPE (YaRN when the file says so, on every layer), one learned sink logit per head that joins each
softmax without a value, a sliding window on layers 0, 2, … and full attention on the others; the FFN
pre-norm is named post_attention_norm; a MoE whose router (with bias) picks the top k logits and
weights them by a softmax over those k; experts with biases and swiglu_oai
(x = min(gate, 7), y = clamp(up, −7, 7), x·sigmoid(1.702·x)·(y + 1)). The LM head is never tied."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from tiny_gguf import Q, TinyConfig, _rms, _rope, rope_cos_sin
from tiny_writer import finish_writer, start_writer, tensor_adder

SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0


def write_gptoss_gguf(path: Path, cfg: TinyConfig, seed: int) -> dict[str, np.ndarray]:
    """Writes the file; returns the float64 dequantized weights by tensor name."""
    rng = np.random.default_rng(seed)
    w, n_vocab = start_writer(path, cfg)
    weights: dict[str, np.ndarray] = {}
    add = tensor_adder(w, cfg, weights)
    E, hd, X, F = cfg.n_embd, cfg.head_dim, cfg.n_expert, cfg.n_ff_exp
    qd, kvd = cfg.n_head * hd, cfg.n_head_kv * hd
    xt = cfg.expert_type if cfg.expert_type is not None else cfg.weight_type
    norm = (lambda n: 1.0 + 0.1 * rng.standard_normal(n))
    add("token_embd.weight", rng.standard_normal((n_vocab, E)) * 0.5, cfg.embd_type)
    add("output.weight", rng.standard_normal((n_vocab, E)) * cfg.output_std, cfg.weight_type)
    add("output_norm.weight", norm(E), Q.F32)
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        add(p + "attn_norm.weight", norm(E), Q.F32)
        add(p + "post_attention_norm.weight", norm(E), Q.F32)
        for name, rows in (("attn_q", qd), ("attn_k", kvd), ("attn_v", kvd)):
            add(p + name + ".weight", rng.standard_normal((rows, E)) / np.sqrt(E), cfg.weight_type)
            add(p + name + ".bias", 0.1 * rng.standard_normal(rows), Q.F32)
        add(p + "attn_output.weight", rng.standard_normal((E, qd)) / np.sqrt(qd), cfg.weight_type)
        add(p + "attn_output.bias", 0.3 * rng.standard_normal(E), Q.F32)
        add(p + "attn_sinks.weight", rng.standard_normal(cfg.n_head), Q.F32)
        # A wide router spread keeps the k-th and (k+1)-th experts apart (no routing near-ties).
        add(p + "ffn_gate_inp.weight", rng.standard_normal((X, E)) * (4.0 / np.sqrt(E)), Q.F32)
        add(p + "ffn_gate_inp.bias", 0.5 * rng.standard_normal(X), Q.F32)
        # Gate/up spread wide enough that swiglu_oai's clamps at ±7 are reached by some elements.
        add(p + "ffn_gate_exps.weight", rng.standard_normal((X, F, E)) * (3.0 / np.sqrt(E)), xt)
        add(p + "ffn_up_exps.weight", rng.standard_normal((X, F, E)) * (3.0 / np.sqrt(E)), xt)
        add(p + "ffn_down_exps.weight", rng.standard_normal((X, E, F)) / np.sqrt(F), xt)
        add(p + "ffn_gate_exps.bias", 0.3 * rng.standard_normal((X, F)), Q.F32)
        add(p + "ffn_up_exps.bias", 0.3 * rng.standard_normal((X, F)), Q.F32)
        add(p + "ffn_down_exps.bias", 0.3 * rng.standard_normal((X, E)), Q.F32)
    finish_writer(w)
    return weights


def swiglu_oai(g: np.ndarray, u: np.ndarray) -> np.ndarray:
    x = np.minimum(g, SWIGLU_LIMIT)
    return x / (1.0 + np.exp(-SWIGLU_ALPHA * x)) * (np.clip(u, -SWIGLU_LIMIT, SWIGLU_LIMIT) + 1.0)


def route(cfg: TinyConfig, W: dict[str, np.ndarray], p: str, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(chosen experts [n, k] best first, their weights [n, k]): top k logits, softmax over those."""
    logits = h @ W[p + "ffn_gate_inp.weight"].T + W[p + "ffn_gate_inp.bias"]
    chosen = np.argsort(-logits, axis=-1, kind="stable")[:, : cfg.n_expert_used]
    top = np.take_along_axis(logits, chosen, axis=-1)
    e = np.exp(top - top.max(axis=-1, keepdims=True))
    return chosen, e / e.sum(axis=-1, keepdims=True)


def moe(cfg: TinyConfig, W: dict[str, np.ndarray], p: str, h: np.ndarray) -> np.ndarray:
    chosen, weights = route(cfg, W, p, h)
    G, U, D = (W[p + f"ffn_{t}_exps.weight"] for t in ("gate", "up", "down"))
    bG, bU, bD = (W[p + f"ffn_{t}_exps.bias"] for t in ("gate", "up", "down"))
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        for e, wt in zip(chosen[t], weights[t]):
            a = swiglu_oai(G[e] @ h[t] + bG[e], U[e] @ h[t] + bU[e])
            out[t] += wt * (D[e] @ a + bD[e])
    return out


def gptoss_reference_logits(cfg: TinyConfig, W: dict[str, np.ndarray], ids: list[int],
                            ffn_inputs: list | None = None) -> np.ndarray:
    """float64 forward; [len(ids), n_vocab] logits (each layer's FFN input appended to ffn_inputs if given)."""
    n, hd = len(ids), cfg.head_dim
    x = W["token_embd.weight"][ids]
    pos = np.arange(n, dtype=np.float64)
    group = cfg.n_head // cfg.n_head_kv
    cos, sin = rope_cos_sin(cfg, W, pos, cfg.rope_base, local=False)  # SWA layers keep the rope scaling
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        h = _rms(x, W[p + "attn_norm.weight"], cfg.eps)
        q = (h @ W[p + "attn_q.weight"].T + W[p + "attn_q.bias"]).reshape(n, cfg.n_head, hd)
        k = (h @ W[p + "attn_k.weight"].T + W[p + "attn_k.bias"]).reshape(n, cfg.n_head_kv, hd)
        v = (h @ W[p + "attn_v.weight"].T + W[p + "attn_v.bias"]).reshape(n, cfg.n_head_kv, hd)
        q, k = _rope(q, cos, sin, True), _rope(k, cos, sin, True)
        local = il % 2 == 0
        sinks = W[p + "attn_sinks.weight"]
        out = np.zeros((n, cfg.n_head, hd))
        for t in range(n):
            lo = max(0, t - cfg.sliding_window + 1) if local else 0
            for hh in range(cfg.n_head):
                s = k[lo : t + 1, hh // group] @ q[t, hh] / np.sqrt(hd)
                m = max(s.max(), sinks[hh])
                e = np.exp(s - m)
                out[t, hh] = e @ v[lo : t + 1, hh // group] / (e.sum() + np.exp(sinks[hh] - m))
        x = x + out.reshape(n, -1) @ W[p + "attn_output.weight"].T + W[p + "attn_output.bias"]
        h = _rms(x, W[p + "post_attention_norm.weight"], cfg.eps)
        if ffn_inputs is not None:
            ffn_inputs.append(h)
        x = x + moe(cfg, W, p, h)
    return _rms(x, W["output_norm.weight"], cfg.eps) @ W["output.weight"].T
