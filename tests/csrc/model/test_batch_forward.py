"""Multi-sequence forward_batch, copy_kv and the fp16 KV cache of ModelRuntime.

ModelRuntime::forward_batch has no Python binding yet, so these tests build the standalone
checker batch_forward_check.cpp with g++ against the runtime's sources (csrc/common, gguf,
quant, model; objects cached under build/batch_forward_check by content hash, at most 2
compile jobs) and run it on tiny random GGUFs and on the real SmolLM2 / Gemma 3 files.

Each checker line is "ok NAME" or "FAIL NAME: why". Every comparison in it is bit-exact
(memcmp of logits rows): a token's logits in a batch of several sequences, in any token order
and with any thread count, equal those of the same sequence run alone through forward().
"""
from __future__ import annotations

from pathlib import Path

import pytest

from native_build import build_checker, run_checker
from tiny_gguf import Q, TinyConfig, write_tiny_gguf

CHECKER = Path(__file__).with_name("batch_forward_check.cpp")

TINY = {
    "llama": TinyConfig(arch="llama"),
    "gemma3-swa": TinyConfig(arch="gemma3", n_layer=6, n_head_kv=1, weight_type=Q.Q5_1, eps=1e-6, rope_base=1e6),
    "qwen2-bias-mha": TinyConfig(arch="qwen2", n_head_kv=4, weight_type=Q.Q5_0, rope_base=1e6),
    # Biases and scaled RoPE (folded into the cos/sin table) keep every guarantee.
    "llama-biases-yarn-freqs": TinyConfig(arch="llama", attn_bias=True, ffn_bias=True, rope_freqs=True,
                                          rope_scaling="yarn", rope_factor=4.0, rope_orig_ctx=1024, n_ctx_train=4096),
    "gemma3-linear": TinyConfig(arch="gemma3", n_layer=6, n_head_kv=1, eps=1e-6, rope_base=100.0,
                                rope_scaling="linear", rope_factor=8.0),
    # MoE: tokens grouped per expert (repacked Q8_0 experts; fp32-activation F16 experts).
    "qwen3moe-q8_0": TinyConfig(arch="qwen3moe", n_expert=8, n_expert_used=2, n_ff_exp=32, eps=1e-6),
    "mixtral-f16": TinyConfig(arch="llama", n_expert=4, n_expert_used=2, n_ff=64, weight_type=Q.F16),
    # gpt-oss: sinks, a 4-position window on even layers, YaRN, biased router and experts (repacked MXFP4).
    "gpt-oss-mxfp4": TinyConfig(arch="gpt-oss", n_layer=4, n_expert=8, n_expert_used=2, n_ff_exp=32, sliding_window=4,
                                rope_scaling="yarn", rope_factor=4.0, rope_orig_ctx=64, tied=False,
                                expert_type=Q.MXFP4),
}
MOE = ["gpt-oss-mxfp4", "mixtral-f16", "qwen3moe-q8_0"]


@pytest.fixture(scope="session")
def checker() -> Path:
    return build_checker(CHECKER)


def _tiny(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.gguf"
    write_tiny_gguf(path, TINY[name], seed=sorted(TINY).index(name))
    return path


@pytest.mark.parametrize("name", sorted(TINY))
def test_batched_sequences_equal_each_sequence_alone(checker, tmp_path, name):
    """(a) interleaved prefill + decode, (b) any token order, (c) copy_kv, on the fast path."""
    out = run_checker(checker, "equivalence", str(_tiny(tmp_path, name)))
    for check in ("(a)interleaved_batch", "(b)shuffled_batch", "(c)copy_kv", "out_rows_subset", "decode_equals_prefill"):
        assert check in out, out
    if name in MOE:  # and those batches mixed sequences that chose different experts
        assert "moe_batch_rows_choose_different_experts" in out, out


def test_kquant_moe_batched_sequences_equal_each_sequence_alone(checker):
    """llama.cpp's Q4_K_M of a qwen3moe (Q4_K and Q6_K experts; tests/data/arch) keeps every guarantee."""
    path = Path(__file__).resolve().parents[2] / "data" / "arch" / "qwen3moe-q4_k_m.gguf"
    out = run_checker(checker, "equivalence", str(path))
    for check in ("(a)interleaved_batch", "(b)shuffled_batch", "moe_batch_rows_choose_different_experts"):
        assert check in out, out


@pytest.mark.parametrize("name", ["llama", "gemma3-swa", "qwen3moe-q8_0", "gpt-oss-mxfp4"])
def test_portable_kernels_are_equally_deterministic(checker, tmp_path, name):
    """The same guarantees with LANESERVE's scalar matmul path and the portable fp16 attention."""
    out = run_checker(checker, "equivalence", str(_tiny(tmp_path, name)), "portable")
    assert "portable" in out


def _real_model(which: str) -> Path:
    import lanes

    return Path(lanes.find_model_file(which))


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_real_models_batched_sequences_equal_alone(checker, which):
    run_checker(checker, "equivalence", str(_real_model(which)))


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_real_models_long_context_bit_identical(checker, which):
    """1100+ positions (three 512-position softmax chunks on global layers): decode logits are
    bit-identical across 1/2/3 threads, prefill chunkings and decode batches of 1–5 tokens."""
    out = run_checker(checker, "long", str(_real_model(which)))
    assert out.count("ok long_") == 5, out


def test_kv_cache_is_fp16_and_lazily_committed(checker):
    """8 slots × 8192 positions of SmolLM2 reserve ~1.5 GB of fp16 KV without holding it."""
    out = run_checker(checker, "lazy", str(_real_model("smollm2")), "8192", "8")
    assert "kv_cache_bytes 1509949440 " in out, out  # 30 layers · K,V · 8 · 8192 · 192 · 2 bytes
