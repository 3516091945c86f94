"""LoRA adapters (csrc/model/lora.*) on tiny random GGUFs: logits against a float64 merged-weights
reference (W + s·B·A), exact base behaviour for B = 0 and scale 0, several adapters adding up, the
token_embd / output special cases, and llama.cpp's file checks with clear errors."""
import numpy as np
import pytest

from lanes import Model

from lora_gguf import ALL_MATRICES, ATTENTION, AdapterSpec, Q, merged_weights, write_adapter
from tiny_gguf import TinyConfig, reference_logits, write_tiny_gguf

IDS = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 10, 84, 104, 101, 32, 113, 117]

# (base, adapter) pairs: ranks 8/16/64, F32/F16/BF16/Q8_0 halves (mixed), attention-only and
# every matrix, token_embd and an untied output head.
CASES = {
    "llama-r8-f32-all": (TinyConfig(arch="llama"), AdapterSpec(rank=8)),
    "llama-r16-f16-attn": (TinyConfig(arch="llama", weight_type=Q.Q4_1),
                           AdapterSpec(rank=16, targets=ATTENTION, a_type=Q.F16, b_type=Q.F16, rel_norm=0.15, seed=1)),
    "qwen2-r64-q8_0-untied-embd-out": (TinyConfig(arch="qwen2", weight_type=Q.Q5_0, tied=False),
                                       AdapterSpec(rank=64, a_type=Q.Q8_0, b_type=Q.Q8_0, seed=2, token_embd=True,
                                                   output=True)),
    "gemma3-r32-q8_0a-f16b-embd": (TinyConfig(arch="gemma3", n_layer=6, n_head_kv=1, eps=1e-6, rope_base=1e6),
                                   AdapterSpec(rank=32, a_type=Q.Q8_0, b_type=Q.F16, seed=3, token_embd=True)),
    "qwen3-r8-bf16-alpha0": (TinyConfig(arch="qwen3", weight_type=Q.Q4_0, eps=1e-6),
                             AdapterSpec(rank=8, a_type=Q.BF16, b_type=Q.F32, alpha=0.0, rel_norm=0.1, seed=4)),
    # A rank that is not a multiple of 8: A·x's last four columns take the kernels' scalar tail.
    "llama-r12-f16a-f32b-all": (TinyConfig(arch="llama", weight_type=Q.Q8_0),
                                AdapterSpec(rank=12, a_type=Q.F16, b_type=Q.F32, seed=5)),
}


def relative_error(ours, ref):
    return float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))


def build(tmp_path, name):
    cfg, spec = CASES[name]
    base = tmp_path / "base.gguf"
    weights = write_tiny_gguf(base, cfg, seed=7)
    adapter = tmp_path / "adapter.gguf"
    pairs = write_adapter(adapter, base, spec)
    return cfg, spec, base, weights, adapter, pairs


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_match_float64_merged_reference(tmp_path, name):
    cfg, spec, base, weights, adapter, pairs = build(tmp_path, name)
    scale = 0.8
    ref = reference_logits(cfg, merged_weights(weights, [(pairs, scale)], [spec.alpha]), IDS)
    model = Model(base, threads=2, ctx_size=64, lora=[(adapter, scale)])
    ours = model.logits(IDS).astype(np.float64)
    # Same bound as the base model's reference test (test_forward_reference.py): the int8
    # activation quantization adds ~1% noise; a misplaced or missing term gives O(10%).
    assert relative_error(ours, ref) < 0.03, relative_error(ours, ref)
    base_ref = reference_logits(cfg, merged_weights(weights, [], []), IDS)
    assert relative_error(base_ref, ref) > 0.1  # the adapter really matters at this size


@pytest.mark.parametrize("name", ["llama-r8-f32-all", "qwen2-r64-q8_0-untied-embd-out"])
def test_b_zero_and_scale_zero_give_exactly_the_base(tmp_path, name):
    cfg, spec, base, _, adapter, _ = build(tmp_path, name)
    zero = tmp_path / "zero.gguf"
    write_adapter(zero, base, AdapterSpec(rank=spec.rank, a_type=spec.a_type, b_type=spec.b_type, zero_b=True,
                                          token_embd=spec.token_embd, output=spec.output))
    model = Model(base, threads=2, ctx_size=64)
    base_logits = model.logits(IDS)
    model.set_lora([(zero, 1.0)])
    assert np.array_equal(model.logits(IDS), base_logits)
    model.set_lora([(adapter, 0.0)])
    assert np.array_equal(model.logits(IDS), base_logits)
    model.set_lora([(adapter, 1.0)])
    assert not np.array_equal(model.logits(IDS), base_logits)
    model.set_lora([])
    assert np.array_equal(model.logits(IDS), base_logits)


def test_several_adapters_add_up(tmp_path):
    cfg = TinyConfig(arch="llama")
    base = tmp_path / "base.gguf"
    weights = write_tiny_gguf(base, cfg, seed=3)
    s1, s2 = AdapterSpec(rank=8, seed=10), AdapterSpec(rank=16, targets=ATTENTION, a_type=Q.F16, b_type=Q.F16, seed=11)
    p1 = write_adapter(tmp_path / "a1.gguf", base, s1)
    p2 = write_adapter(tmp_path / "a2.gguf", base, s2)
    ref = reference_logits(cfg, merged_weights(weights, [(p1, 0.5), (p2, -1.0)], [s1.alpha, s2.alpha]), IDS)
    model = Model(base, threads=2, ctx_size=64, lora=[(tmp_path / "a1.gguf", 0.5), (tmp_path / "a2.gguf", -1.0)])
    assert relative_error(model.logits(IDS).astype(np.float64), ref) < 0.03


def test_generation_uses_the_adapter(tmp_path):
    """Decode (one token per forward) continues as teacher forcing with the adapter predicts."""
    cfg, spec, base, _, adapter, _ = build(tmp_path, "llama-r8-f32-all")
    model = Model(base, threads=1, ctx_size=64, lora=[(adapter, 1.0)])
    gen = model.generate(IDS[:5], max_tokens=8, temperature=0.0, ignore_eos=True)
    list(gen)
    teacher = model.logits(IDS[:5] + gen.token_ids)
    eog = list(model.eog_ids)
    for step, token in enumerate(gen.token_ids):
        row = teacher[4 + step].copy()
        row[eog] = -np.inf
        assert int(np.argmax(row)) == token, step


# --- bad files: llama.cpp's checks, with messages naming the file and the problem -----------------
@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    path = tmp_path_factory.mktemp("base") / "base.gguf"
    write_tiny_gguf(path, TinyConfig(arch="llama"), seed=1)
    return path


def load_error(base, adapter) -> str:
    model = Model(base, threads=1, ctx_size=32)
    with pytest.raises(ValueError) as e:
        model.set_lora([(adapter, 1.0)])
    assert str(adapter) in str(e.value)
    return str(e.value)


def test_architecture_mismatch_names_both(tmp_path, tiny_base):
    bad = tmp_path / "qwen.gguf"
    write_adapter(bad, tiny_base, AdapterSpec(), arch="qwen2")
    msg = load_error(tiny_base, bad)
    assert "'qwen2'" in msg and "'llama'" in msg


def test_missing_half(tmp_path, tiny_base):
    bad = tmp_path / "half.gguf"
    write_adapter(bad, tiny_base, AdapterSpec(targets=("attn_q",)), skip=("blk.1.attn_q.weight.lora_b",))
    assert "blk.1.attn_q.weight" in load_error(tiny_base, bad) and "lora_b" in load_error(tiny_base, bad)


def test_shape_mismatch(tmp_path, tiny_base):
    bad = tmp_path / "shape.gguf"
    extra = {"blk.0.ffn_down.weight.lora_a": np.zeros((8, 64)), "blk.0.ffn_down.weight.lora_b": np.zeros((64, 8))}
    write_adapter(bad, tiny_base, AdapterSpec(targets=("attn_q",)), extra_tensors=extra)
    msg = load_error(tiny_base, bad)
    assert "blk.0.ffn_down.weight" in msg and "do not fit" in msg


def test_transposed_a(tmp_path, tiny_base):
    bad = tmp_path / "transposed.gguf"
    extra = {"blk.0.attn_q.weight.lora_a": np.zeros((64, 8)), "blk.0.attn_q.weight.lora_b": np.zeros((64, 8))}
    write_adapter(bad, tiny_base, AdapterSpec(targets=("attn_k",)), extra_tensors=extra)
    assert "blk.0.attn_q.weight" in load_error(tiny_base, bad)


def test_unknown_suffix_and_unknown_tensor(tmp_path, tiny_base):
    bad = tmp_path / "suffix.gguf"
    write_adapter(bad, tiny_base, AdapterSpec(targets=("attn_q",)), extra_tensors={"blk.0.attn_q.weight.lora_c": np.zeros(8)})
    assert "unexpected suffix" in load_error(tiny_base, bad)
    other = tmp_path / "other.gguf"
    write_adapter(other, tiny_base, AdapterSpec(targets=("attn_q",)),
                  extra_tensors={"blk.9.attn_q.weight.lora_a": np.zeros((8, 64)),
                                 "blk.9.attn_q.weight.lora_b": np.zeros((64, 8))})
    assert "not a tensor of the base model" in load_error(tiny_base, other)


def test_norm_entries_are_skipped(tmp_path, tiny_base):
    ok = tmp_path / "norm.gguf"
    write_adapter(ok, tiny_base, AdapterSpec(targets=("attn_q",)), extra_tensors={"blk.0.attn_norm.weight": np.ones(64)})
    Model(tiny_base, threads=1, ctx_size=32, lora=[(ok, 1.0)])


def test_not_an_adapter_and_unknown_type(tmp_path, tiny_base):
    assert "expected 'adapter'" in load_error(tiny_base, tiny_base)  # a model is not an adapter
    bad = tmp_path / "iq.gguf"
    import gguf
    w = gguf.GGUFWriter(str(bad), "llama")
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, 8.0)
    # IQ2_XXS (type 16): a ggml type the runtime does not run.
    w.add_tensor("blk.0.attn_q.weight.lora_a", np.zeros((8, 66), np.uint8), raw_dtype=Q.IQ2_XXS)
    w.add_tensor("blk.0.attn_q.weight.lora_b", np.zeros((64, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert "blk.0.attn_q.weight.lora_a" in load_error(tiny_base, bad)


def test_adapter_type_must_be_lora(tmp_path, tiny_base):
    import gguf
    bad = tmp_path / "cvec.gguf"
    w = gguf.GGUFWriter(str(bad), "llama")
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "control_vector")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert "expected 'lora'" in load_error(tiny_base, bad)


@pytest.mark.parametrize("name", ["llama-r16-f16-attn", "llama-r12-f16a-f32b-all"])
def test_portable_kernels_match_the_reference(tmp_path, name):
    """The portable (scalar-ISA) LoRA kernels: same reference bound, and close to the SIMD path."""
    from lanes import _runtime

    cfg, spec, base, weights, adapter, pairs = build(tmp_path, name)
    ref = reference_logits(cfg, merged_weights(weights, [(pairs, 1.0)], [spec.alpha]), IDS)
    model = Model(base, threads=2, ctx_size=64, lora=[(adapter, 1.0)])
    simd = model.logits(IDS).astype(np.float64)
    previous = _runtime.quant.active_isa()
    assert _runtime.quant.set_isa("scalar")
    try:
        portable = model.logits(IDS).astype(np.float64)
    finally:
        _runtime.quant.set_isa(previous)
    assert relative_error(portable, ref) < 0.03
    assert relative_error(portable, simd) < 1e-4


@pytest.mark.parametrize("name", ["qwen2-r64-q8_0-untied-embd-out", "gemma3-r32-q8_0a-f16b-embd",
                                  "llama-r12-f16a-f32b-all"])
def test_thread_count_never_changes_a_bit(tmp_path, name):
    """q/k/v and gate/up terms run as one pool dispatch (one task per matrix and chunk of rows): one row
    or many, on 1, 2 or 3 threads, every logit is the same."""
    _, _, base, _, adapter, _ = build(tmp_path, name)
    models = [Model(base, threads=t, ctx_size=64, lora=[(adapter, 0.8)]) for t in (1, 2, 3)]
    for n in (1, 3, len(IDS)):
        first = models[0].logits(IDS[:n])
        for m in models[1:]:
            assert np.array_equal(m.logits(IDS[:n]), first), n


@pytest.mark.parametrize("name", ["llama-r16-f16-attn", "qwen2-r64-q8_0-untied-embd-out", "llama-r12-f16a-f32b-all"])
def test_decode_sized_and_prefill_sized_batches_give_the_same_bits(tmp_path, name):
    """Up to 16 rows with adapters run their terms as side tasks of the base matmul's dispatch, more
    rows after it (model/lora.h): a row's logits are the same bits either way."""
    _, _, base, _, adapter, _ = build(tmp_path, name)
    model = Model(base, threads=2, ctx_size=64, lora=[(adapter, 0.8)])
    whole = model.logits(IDS)  # 20 rows: the terms after the base matmul
    for n in (1, 2, 5):       # ≤ 16 rows: side tasks
        assert np.array_equal(model.logits(IDS[:n]), whole[:n]), n
