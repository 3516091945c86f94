"""LoRA on the real models (SmolLM2 Q4_1, Gemma 3 Q4_K_M) against a float64 merged-weights reference
(W + s·B·A, the base weights dequantized exactly): teacher-forced next-token distributions.

The tolerance is the base model's own distance from the same float64 reference (the runtime's int8
activation quantization, which the golden tests accept against llama.cpp): with an adapter the
runtime must stay as close (KL within 2× + 0.005, top-1 within 10 points), while the adapter moves
the reference itself much further than that."""
import gguf
import numpy as np
import pytest

import lanes
from lanes import Model

from golden import log_softmax
from lora_gguf import REAL_CASES, cached_adapter, dequantized, read_base, write_adapter  # noqa: F401
from tiny_gguf import TinyConfig, reference_logits

PROMPTS = ["The capital of France is a city", "Once upon a time, in a small village by the sea, there lived"]


class LazyWeights(dict):
    """Base tensors dequantized on access (never all at once), with Σ s·B·A added: the reference
    forward reads each layer's matrices once."""

    def __init__(self, tensors, deltas):
        super().__init__()
        self.tensors, self.deltas = tensors, deltas

    def __contains__(self, name):
        return name in self.tensors

    def __getitem__(self, name):
        if name == "output.weight" and "output.weight" not in self.tensors:
            t = self.tensors["token_embd.weight"]  # tied head: token_embd's adapter changes only the lookup
            return ChunkedHead(gguf.quants.dequantize(t.data, t.tensor_type).reshape(int(t.shape[1]), -1))
        if name == "token_embd.weight":
            return EmbeddingRows(self.tensors[name], self.deltas.get(name, ()))
        w = dequantized(self.tensors[name])
        for a, b, s in self.deltas.get(name, ()):
            w = w + s * (a @ b.T if name == "token_embd.weight" else b @ a)
        return w

    def get(self, name, default=None):
        return self[name] if name in self or name == "output.weight" else default


class EmbeddingRows:
    """emb[ids]: only those rows dequantized (plus token_embd's deltas A[ids]·Bᵀ)."""

    def __init__(self, t, deltas):
        self.t, self.deltas = t, deltas

    def __getitem__(self, ids):
        data = np.asarray(self.t.data).reshape(int(self.t.shape[1]), -1)  # [n_vocab][row bytes]
        rows = gguf.quants.dequantize(data[ids], self.t.tensor_type).astype(np.float64).reshape(len(ids), -1)
        for a, b, s in self.deltas:
            rows = rows + s * (a[ids] @ b.T)
        return rows


class ChunkedHead:
    """x @ head.T in float64 chunks (Gemma's head is 262144 × 640)."""

    __array_ufunc__ = None  # numpy defers x @ head to __rmatmul__

    def __init__(self, w):
        self.w = w  # float32 [n_vocab][n_embd]

    @property
    def T(self):
        return self

    def __rmatmul__(self, x):
        return np.concatenate([x @ self.w[i:i + 16384].astype(np.float64).T for i in range(0, len(self.w), 16384)],
                              axis=1)


def config(model) -> TinyConfig:
    if model == "smollm2":
        return TinyConfig("llama", 30, 576, 9, 3, 64, 1536, 1e-5, 1e5)
    return TinyConfig("gemma3", 18, 640, 4, 1, 256, 2048, 1e-6, 1e6, sliding_window=512)


def distance(ours, ref):
    """(top-1 agreement, mean KL(ref ‖ ours)) over positions."""
    lo, lr = log_softmax(ours), log_softmax(ref)
    kl = np.sum(np.exp(lr) * (lr - lo), axis=-1)
    return float(np.mean(np.argmax(lo, -1) == np.argmax(lr, -1))), float(np.mean(kl))


@pytest.mark.parametrize("case", ["smollm2-r16-f16-all", "gemma3-r16-q8_0a-f16b-attn"])
def test_real_model_with_adapter_matches_float64_merged_reference(tmp_path, case):
    model_name, spec, scale = REAL_CASES[case]
    base = lanes.smollm2_path() if model_name == "smollm2" else lanes.gemma3_path()
    adapter = tmp_path / "adapter.gguf"
    pairs = write_adapter(adapter, base, spec)
    _, tensors = read_base(base)
    s = scale * spec.alpha / spec.rank
    deltas = {name: [(a, b, s)] for name, (a, b) in pairs.items()}
    cfg = config(model_name)
    model = Model(base, threads=2, ctx_size=256)
    ids = [t for p in PROMPTS for t in model.tokenize(p)][:24]
    ours_base = model.logits(ids).astype(np.float64)
    model.set_lora([(adapter, scale)])
    ours_lora = model.logits(ids).astype(np.float64)
    ref_base = reference_logits(cfg, LazyWeights(tensors, {}), ids)
    ref_lora = reference_logits(cfg, LazyWeights(tensors, deltas), ids)
    top1_base, kl_base = distance(ours_base, ref_base)
    top1_lora, kl_lora = distance(ours_lora, ref_lora)
    _, kl_effect = distance(ref_base, ref_lora)
    print(f"{case}: base top1 {top1_base:.3f} KL {kl_base:.4f}; lora top1 {top1_lora:.3f} KL {kl_lora:.4f}; "
          f"adapter effect KL {kl_effect:.3f}")
    assert kl_lora <= 2 * kl_base + 0.005, (kl_lora, kl_base)
    assert top1_lora >= top1_base - 0.1, (top1_lora, top1_base)
    assert kl_effect > 5 * kl_lora  # the adapter moves the distribution far more than our error
