"""The runtime's forward pass agrees with a float64 numpy reference on tiny random GGUFs."""
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

CASES = {
    "llama-q8_0": TinyConfig(arch="llama"),
    "llama-q4_1-untied": TinyConfig(arch="llama", weight_type=Q.Q4_1, tied=False),
    "llama-mha-f16": TinyConfig(arch="llama", n_head_kv=4, weight_type=Q.F16, embd_type=Q.F16),
    "qwen2-bias-q5_0": TinyConfig(arch="qwen2", weight_type=Q.Q5_0, rope_base=1e6),
    "qwen2-output-bias": TinyConfig(arch="qwen2", output_bias=True, tied=False),
    "llama-biases-q8_0": TinyConfig(arch="llama", attn_bias=True, ffn_bias=True),
    "qwen3-qknorm-q4_0": TinyConfig(arch="qwen3", weight_type=Q.Q4_0, eps=1e-6),
    "gemma3-swa-q5_1": TinyConfig(arch="gemma3", n_layer=6, n_head_kv=1, weight_type=Q.Q5_1, eps=1e-6, rope_base=1e6),
}
IDS = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 10, 84, 104, 101, 32, 113, 117]


@pytest.mark.parametrize("name", sorted(CASES))
def test_batched_logits_match_reference(tmp_path, name):
    ours, ref, _ = runtime_and_reference(tmp_path / f"{name}.gguf", CASES[name], sorted(CASES).index(name), IDS)
    # int8 activation quantization adds ~1% noise; a structural error gives O(1).
    assert relative_error(ours, ref) < 0.03, relative_error(ours, ref)
    # And every position individually (the sliding window matters only late in the prompt).
    for t in range(len(IDS)):
        assert relative_error(ours[t], ref[t]) < 0.06, (t, relative_error(ours[t], ref[t]))


def test_decode_path_matches_batched_path(tmp_path):
    """Greedy generation (one token per forward) continues exactly as batch teacher forcing predicts."""
    cfg = CASES["llama-q8_0"]
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, cfg)
    model = Model(path, threads=1, ctx_size=64)
    gen = model.generate(IDS[:5], max_tokens=8, temperature=0.0, ignore_eos=True)
    list(gen)
    assert gen.stats.completion_tokens == 8 and gen.stats.finish_reason == "length"
    full = IDS[:5] + gen.token_ids
    teacher = model.logits(full)
    eog = set(model.eog_ids)
    for step, token in enumerate(gen.token_ids):
        row = teacher[4 + step].copy()
        row[list(eog)] = -np.inf  # ignore_eos masks them
        assert int(np.argmax(row)) == token, step


def test_results_do_not_depend_on_thread_count(tmp_path):
    cfg = CASES["qwen2-bias-q5_0"]
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, cfg)
    one = Model(path, threads=1, ctx_size=64).logits(IDS)
    two = Model(path, threads=2, ctx_size=64).logits(IDS)
    assert np.array_equal(one, two)


def test_unsupported_architecture_is_a_clear_error(tmp_path):
    import gguf

    path = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(path), "mamba")
    w.add_block_count(1)
    w.add_tensor("x", np.zeros((2, 32), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    with pytest.raises(ValueError, match="unsupported architecture 'mamba'") as info:
        Model(path, threads=1)
    assert str(path) in str(info.value)


def test_missing_tensor_is_a_clear_error(tmp_path):
    import gguf

    cfg = CASES["llama-q8_0"]
    src = tmp_path / "full.gguf"
    write_tiny_gguf(src, cfg)
    # Rewrite without blk.1.ffn_down.weight.
    r = gguf.GGUFReader(str(src))
    dst = tmp_path / "missing.gguf"
    w = gguf.GGUFWriter(str(dst), "llama")
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(f.name, f.contents(), vt, sub_type=f.types[-1])
        else:
            w.add_key_value(f.name, f.contents(), vt)
    for t in r.tensors:
        if t.name != "blk.1.ffn_down.weight":
            w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    with pytest.raises(ValueError, match="missing tensor blk.1.ffn_down.weight"):
        Model(dst, threads=1)


def test_biases_matter_at_this_size(tmp_path):
    """The llama bias case would fail its tolerance if the runtime ignored the biases."""
    cfg = CASES["llama-biases-q8_0"]
    weights = write_tiny_gguf(tmp_path / "m.gguf", cfg, seed=sorted(CASES).index("llama-biases-q8_0"))
    without = {k: v for k, v in weights.items() if not k.endswith(".bias")}
    assert relative_error(reference_logits(cfg, without, IDS), reference_logits(cfg, weights, IDS)) > 0.1


@pytest.mark.parametrize("arch, extra", [
    ("llama", "blk.0.attn_qkv.weight"),  # an unknown name
    ("qwen2", "blk.1.attn_output.bias"),  # llama.cpp reads attn_output.bias for llama only
    ("qwen3", "output.bias"),  # the LM head bias: qwen2 only
    ("qwen3", "rope_freqs.weight"),  # frequency factors: llama only
    ("gemma3", "blk.0.ffn_up.bias"),
])
def test_tensor_the_forward_does_not_use_is_refused_by_name(tmp_path, arch, extra):
    cfg = TinyConfig(arch=arch, n_head_kv=1 if arch == "gemma3" else 2, extra_tensors=(extra,))
    path = tmp_path / "extra.gguf"
    write_tiny_gguf(path, cfg)
    with pytest.raises(ValueError, match=f"unsupported tensor {extra} for architecture {arch}") as info:
        Model(path, threads=1)
    assert str(path) in str(info.value)


def test_gpt_oss_sinks_hold_across_attention_chunks(tmp_path):
    """A 700-token gpt-oss prompt: the full-attention layer splits positions into 512-position chunks and the
    sink joins the softmax once, across them (model/attention.h). Without sinks the logits move by ~50; here
    they stay within the ~1% of the fp16 K/V cache and int8 activations, on one thread and on two alike."""
    from dataclasses import replace

    from arch_cases import CASES as ARCH_CASES

    cfg, seed = ARCH_CASES["gpt-oss-f32"]
    cfg = replace(cfg, n_ctx_train=2048, rope_orig_ctx=512)
    path = tmp_path / "gpt-oss.gguf"
    weights = write_tiny_gguf(path, cfg, seed=seed)
    ids = [int(t) for t in np.random.default_rng(1).integers(0, 256, 700)]
    ref = reference_logits(cfg, weights, ids)
    one = Model(path, threads=1, ctx_size=1024).logits(ids).astype(np.float64)
    two = Model(path, threads=2, ctx_size=1024).logits(ids).astype(np.float64)
    assert np.array_equal(one, two)
    assert relative_error(one[512:], ref[512:]) < 0.01, relative_error(one[512:], ref[512:])
