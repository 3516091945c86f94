"""Mixture-of-experts files the runtime cannot run as llama.cpp does are refused, naming what is wrong
(the forward itself is checked against llama.cpp in test_arch_llama_cpp.py and for batch invariance
in test_batch_forward.py)."""
import pytest
from tiny_gguf import TinyConfig, write_tiny_gguf

from lanes import Model

QWEN3MOE = {"arch": "qwen3moe", "n_expert": 4, "n_expert_used": 2, "n_ff_exp": 32}
MIXTRAL = {"arch": "llama", "n_expert": 4, "n_expert_used": 2, "n_ff": 64}


def refused(tmp_path, cfg: TinyConfig, match: str) -> None:
    path = tmp_path / "moe.gguf"
    write_tiny_gguf(path, cfg)
    with pytest.raises(ValueError, match=match) as info:
        Model(path, threads=1, ctx_size=32)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("base, name", [
    (QWEN3MOE, "blk.1.ffn_down_exps.weight"),
    (QWEN3MOE, "blk.0.ffn_gate_inp.weight"),
    (MIXTRAL, "blk.1.ffn_gate_exps.weight"),
    (MIXTRAL, "blk.0.ffn_up_exps.weight"),
])
def test_missing_expert_tensor_is_refused_by_name(tmp_path, base, name):
    refused(tmp_path, TinyConfig(**base, drop_tensors=(name,)), f"missing tensor {name.replace('.', '[.]')}")


@pytest.mark.parametrize("value, what", [(2, "sigmoid"), (3, "softmax_weight"), (0, "none"), (9, "unknown")])
def test_other_gating_function_is_refused_naming_it(tmp_path, value, what):
    cfg = TinyConfig(**QWEN3MOE, moe_kv=(("expert_gating_func", value),))
    refused(tmp_path, cfg, rf"unsupported qwen3moe[.]expert_gating_func {value} \({what}\)")


def test_softmax_gating_key_is_accepted(tmp_path):
    path = tmp_path / "moe.gguf"
    write_tiny_gguf(path, TinyConfig(**MIXTRAL, moe_kv=(("expert_gating_func", 1), ("expert_weights_norm", True))))
    assert Model(path, threads=1, ctx_size=32).logits([1, 2, 3]).shape[0] == 3


@pytest.mark.parametrize("key, value", [("expert_weights_norm", False), ("expert_weights_scale", 2.5),
                                        ("expert_group_count", 2)])
def test_other_routing_keys_are_refused_naming_them(tmp_path, key, value):
    refused(tmp_path, TinyConfig(**MIXTRAL, moe_kv=((key, value),)), f"unsupported llama[.]{key}")


def test_expert_used_count_beyond_expert_count_is_refused(tmp_path):
    refused(tmp_path, TinyConfig(**dict(QWEN3MOE, n_expert_used=5)), "invalid qwen3moe[.]expert_used_count")


def test_shared_expert_tensor_is_refused_by_name(tmp_path):
    # qwen2moe-style shared experts: not read by llama.cpp's qwen3moe, so not run by us either.
    cfg = TinyConfig(**QWEN3MOE, extra_tensors=("blk.0.ffn_gate_shexp.weight",))
    refused(tmp_path, cfg, "unsupported tensor blk.0.ffn_gate_shexp.weight for architecture qwen3moe")


def test_dense_ffn_tensor_in_a_moe_file_is_refused_by_name(tmp_path):
    cfg = TinyConfig(**MIXTRAL, extra_tensors=("blk.1.ffn_down.weight",))
    refused(tmp_path, cfg, "unsupported tensor blk.1.ffn_down.weight for architecture llama")


GPTOSS = {"arch": "gpt-oss", "n_expert": 4, "n_expert_used": 2, "n_ff_exp": 32, "tied": False}


@pytest.mark.parametrize("name", ["blk.0.attn_sinks.weight", "blk.1.ffn_gate_inp.bias", "blk.0.ffn_up_exps.bias",
                                  "blk.1.ffn_down_exps.bias", "blk.0.attn_output.bias", "blk.1.post_attention_norm.weight"])
def test_gpt_oss_missing_tensor_is_refused_by_name(tmp_path, name):
    refused(tmp_path, TinyConfig(**GPTOSS, drop_tensors=(name,)), f"missing tensor {name.replace('.', '[.]')}")


@pytest.mark.parametrize("value, what", [(1, "softmax"), (2, "sigmoid")])
def test_gpt_oss_other_gating_function_is_refused_naming_it(tmp_path, value, what):
    cfg = TinyConfig(**GPTOSS, moe_kv=(("expert_gating_func", value),))
    refused(tmp_path, cfg, rf"unsupported gpt-oss[.]expert_gating_func {value} \({what}\): .* softmax_weight \(3\)")


def test_gpt_oss_own_routing_keys_are_accepted_and_renormalising_is_refused(tmp_path):
    path = tmp_path / "moe.gguf"
    write_tiny_gguf(path, TinyConfig(**GPTOSS, moe_kv=(("expert_gating_func", 3), ("expert_weights_norm", False))))
    assert Model(path, threads=1, ctx_size=32).logits([1, 2, 3]).shape[0] == 3
    cfg = TinyConfig(**GPTOSS, moe_kv=(("expert_weights_norm", True),))
    refused(tmp_path, cfg, "unsupported gpt-oss[.]expert_weights_norm true: gpt-oss does not renormalise")


def test_gpt_oss_other_window_pattern_is_refused(tmp_path):
    cfg = TinyConfig(**GPTOSS, moe_kv=(("attention.sliding_window_pattern", 3),))
    refused(tmp_path, cfg, "unsupported gpt-oss[.]attention[.]sliding_window_pattern")
