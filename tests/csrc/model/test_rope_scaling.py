"""RoPE variants (Llama 3 frequency factors, linear and YaRN scaling) agree with the float64
reference written from llama.cpp's definitions (tiny_gguf.rope_cos_sin), and --ctx-size may go
beyond the training context only as far as the scaling extends it."""
import dataclasses

import numpy as np
import pytest
from tiny_gguf import (
    Q,
    TinyConfig,
    reference_logits,
    relative_error,
    runtime_and_reference,
    write_tiny_gguf,
)

from lanes import Model

# Sizes where every variant changes the logits by far more than the tolerance (checked below):
# a low rope base or a short original context puts many rotary pairs in the scaled range within
# 48 positions. YARN (original context 1024, base 1e4) ramps over pairs 1..5 of 8: pair 0 keeps
# its extrapolated angle, pairs 5..7 are interpolated.
YARN = {"rope_scaling": "yarn", "rope_factor": 4.0, "rope_orig_ctx": 1024, "n_ctx_train": 4096}
CASES = {
    "llama-rope-freqs": TinyConfig(arch="llama", rope_base=100.0, rope_freqs=True, llama3_orig_ctx=64),
    "llama-linear": TinyConfig(arch="llama", rope_base=100.0, rope_scaling="linear", rope_factor=4.0),
    "llama-factor-without-type": TinyConfig(arch="llama", rope_base=100.0, rope_factor=4.0),  # absent type = linear
    "llama-yarn": TinyConfig(arch="llama", **YARN),
    "llama-yarn-attn-factor": TinyConfig(arch="llama", rope_attn_factor=0.8, **YARN),
    "llama-yarn-rope-freqs": TinyConfig(arch="llama", rope_freqs=True, llama3_orig_ctx=64, **YARN),
    "qwen2-yarn": TinyConfig(arch="qwen2", **YARN),
    "gemma3-linear": TinyConfig(arch="gemma3", n_layer=6, n_head_kv=1, eps=1e-6, rope_base=100.0, sliding_window=8,
                                rope_scaling="linear", rope_factor=8.0),
    "gemma3-yarn": TinyConfig(arch="gemma3", n_layer=6, n_head_kv=1, eps=1e-6, rope_base=100.0, sliding_window=8,
                              rope_scaling="yarn", rope_factor=4.0, rope_orig_ctx=64),  # ramp over pairs 0..5
}
IDS = [int(t) for t in np.random.default_rng(7).integers(32, 127, 48)]


def unscaled(cfg: TinyConfig) -> TinyConfig:
    return dataclasses.replace(cfg, rope_scaling=None, rope_factor=0.0, rope_orig_ctx=0, rope_attn_factor=None,
                               rope_freqs=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_match_reference(tmp_path, name):
    cfg = CASES[name]
    ours, ref, weights = runtime_and_reference(tmp_path / f"{name}.gguf", cfg, sorted(CASES).index(name), IDS)
    # int8 activation quantization adds ~1% noise; a wrong angle or scale gives O(0.1-1).
    err = relative_error(ours, ref)
    print(f"{name}: relative error {err:.4f}, max |logit diff| {np.abs(ours - ref).max():.4f}")
    assert err < 0.03, err
    for t in range(len(IDS)):
        assert relative_error(ours[t], ref[t]) < 0.06, (t, relative_error(ours[t], ref[t]))
    # The variant matters at this size: the unscaled reference is far outside the tolerance.
    plain = {k: v for k, v in weights.items() if k != "rope_freqs.weight"}
    assert relative_error(reference_logits(unscaled(cfg), plain, IDS), ref) > 0.1


@pytest.mark.parametrize("name", sorted(CASES))
def test_f32_weights_match_reference_closely(tmp_path, name):
    """With F32 weights nothing is quantized but the fp16 KV cache (~3e-4 relative): an angle off
    by one ramp pair or a scale off by a percent shows here."""
    cfg = dataclasses.replace(CASES[name], weight_type=Q.F32, embd_type=Q.F32)
    ours, ref, _ = runtime_and_reference(tmp_path / f"{name}.gguf", cfg, sorted(CASES).index(name), IDS)
    assert relative_error(ours, ref) < 2e-3, relative_error(ours, ref)


@pytest.mark.parametrize("name", ["llama-yarn-rope-freqs", "gemma3-linear"])
def test_decode_matches_batched_prefill(tmp_path, name):
    """One token per forward (decode) continues exactly as batch teacher forcing predicts."""
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, CASES[name])
    model = Model(path, threads=1, ctx_size=64)
    gen = model.generate(IDS[:8], max_tokens=24, temperature=0.0, ignore_eos=True)
    list(gen)
    teacher = model.logits(IDS[:8] + gen.token_ids)
    eog = list(model.eog_ids)
    for step, token in enumerate(gen.token_ids):
        row = teacher[7 + step].copy()
        row[eog] = -np.inf
        assert int(np.argmax(row)) == token, step


@pytest.mark.parametrize("cfg, limit, why", [
    (TinyConfig(), 256, "no rope scaling that extends it"),
    (TinyConfig(rope_scaling="none", rope_factor=4.0), 256, "no rope scaling that extends it"),
    (TinyConfig(rope_scaling="linear", rope_factor=2.0), 512, "linear rope scaling \\(factor 2\\) extends to 512"),
    (TinyConfig(rope_scaling="yarn", rope_factor=4.0), 1024, "yarn rope scaling \\(factor 4\\) extends to 1024"),
    (TinyConfig(rope_scaling="yarn", rope_factor=4.0, rope_orig_ctx=128), 512, "extends to 512"),
    (TinyConfig(rope_freqs=True), 256, "no rope scaling that extends it"),
])
def test_ctx_size_beyond_training_context_only_as_far_as_scaling_allows(tmp_path, cfg, limit, why):
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, cfg)
    assert Model(path, threads=1, ctx_size=limit).n_ctx == limit
    with pytest.raises(ValueError, match=f"ctx_size {limit + 1} exceeds the model's training context 256.*{why}"):
        Model(path, threads=1, ctx_size=limit + 1)


def test_unsupported_rope_scaling_is_refused(tmp_path):
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, TinyConfig(rope_scaling="longrope", rope_factor=4.0))
    with pytest.raises(ValueError, match="unsupported rope scaling 'longrope'"):
        Model(path, threads=1)
