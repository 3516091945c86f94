"""The mixture-of-experts part of the tiny GGUFs (tiny_gguf.py): keys, router and expert tensors, and
the float64 reference of llama.cpp's MoE FFN for qwen3moe and llama (Mixtral) files.

llama.cpp (llm_graph_context::build_moe_ffn, gating softmax, norm_w true, no weight scale): softmax
over all n_expert router logits, the n_expert_used most probable experts, their probabilities divided
by their sum; each chosen expert is a SwiGLU FFN; the output is the weighted sum of their outputs."""
from __future__ import annotations

import gguf
import numpy as np


def write_moe_keys(w: gguf.GGUFWriter, cfg) -> None:
    w.add_expert_count(cfg.n_expert)
    w.add_expert_used_count(cfg.n_expert_used)
    if cfg.arch in ("qwen3moe", "gpt-oss"):
        w.add_expert_feed_forward_length(cfg.n_ff_exp)
    for name, value in cfg.moe_kv:  # extra keys (the loader tests' refused routings)
        key = f"{cfg.arch}.{name}"
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        else:
            w.add_float32(key, float(value))


def expert_width(cfg) -> int:
    return cfg.n_ff_exp if cfg.arch == "qwen3moe" else cfg.n_ff


def add_moe_tensors(add, rng: np.random.Generator, cfg, prefix: str) -> None:
    """Router (F32, as llama-quantize keeps it) and the 3-D expert tensors [n_expert, rows, n_in]."""
    E, F, X = cfg.n_embd, expert_width(cfg), cfg.n_expert
    qtype = cfg.expert_type if cfg.expert_type is not None else cfg.weight_type
    # A wide router spread keeps the k-th and (k+1)-th experts apart (no routing near-ties).
    add(prefix + "ffn_gate_inp.weight", rng.standard_normal((X, E)) * (4.0 / np.sqrt(E)), gguf.GGMLQuantizationType.F32)
    add(prefix + "ffn_gate_exps.weight", rng.standard_normal((X, F, E)) / np.sqrt(E), qtype)
    add(prefix + "ffn_up_exps.weight", rng.standard_normal((X, F, E)) / np.sqrt(E), qtype)
    add(prefix + "ffn_down_exps.weight", rng.standard_normal((X, E, F)) / np.sqrt(F), qtype)


def route(cfg, W: dict[str, np.ndarray], prefix: str, h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(chosen experts [n, k] best first, their normalised weights [n, k], all probabilities [n, n_expert])."""
    logits = h @ W[prefix + "ffn_gate_inp.weight"].T
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    chosen = np.argsort(-probs, axis=-1, kind="stable")[:, : cfg.n_expert_used]
    weights = np.take_along_axis(probs, chosen, axis=-1)
    return chosen, weights / weights.sum(axis=-1, keepdims=True), probs


def moe_ffn_reference(cfg, W: dict[str, np.ndarray], prefix: str, h: np.ndarray) -> np.ndarray:
    chosen, weights, _ = route(cfg, W, prefix, h)
    G, U, D = (W[prefix + f"ffn_{t}_exps.weight"] for t in ("gate", "up", "down"))
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        for e, wt in zip(chosen[t], weights[t]):
            g, u = G[e] @ h[t], U[e] @ h[t]
            out[t] += wt * (D[e] @ (g / (1 + np.exp(-g)) * u))
    return out


def router_min_gap(cfg, W: dict[str, np.ndarray], ffn_inputs: list[np.ndarray]) -> float:
    """Smallest router logit gap, over every token and layer, between the k-th and (k+1)-th expert:
    a routing another implementation's rounding could flip when it is tiny."""
    gaps = []
    for il, h in enumerate(ffn_inputs):
        logits = h @ W[f"blk.{il}.ffn_gate_inp.weight"].T + W.get(f"blk.{il}.ffn_gate_inp.bias", 0.0)  # gpt-oss: bias
        top = -np.sort(-logits, axis=-1)
        gaps.append(float((top[:, cfg.n_expert_used - 1] - top[:, cfg.n_expert_used]).min()))
    return min(gaps)
