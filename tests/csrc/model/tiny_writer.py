"""The GGUF writing shared by the tiny test models (tiny_gguf.py, tiny_gptoss.py): the model keys and a
byte-level BPE tokenizer, then tensors quantized by the gguf package, recorded as float64 for the references."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
from tiny_moe import write_moe_keys

Q = gguf.GGMLQuantizationType


# granite's multipliers in the tiny files: all ≠ 1 (attention 0.1 ≠ 1/sqrt(16)), so each one matters.
GRANITE_SCALES = {"embedding": 3.0, "residual": 0.5, "attention": 0.1, "logit": 2.5}


def byte_vocab() -> list[str]:
    """GPT-2 byte-level alphabet: 256 single-character tokens, in byte order."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(0x100 + extra)
            extra += 1
    return [mapping[b] for b in range(256)]


def start_writer(path: Path, cfg) -> tuple[gguf.GGUFWriter, int]:
    """A writer holding the model keys and the tokenizer (the tensors still to add), and n_vocab."""
    tokens = byte_vocab() + ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    # A few merges so BPE has something to do: "Ġt", "he", "Ġthe".
    tokens += ["Ġt", "he", "Ġthe"]
    merges = ["Ġ t", "h e", "Ġt he"]
    n_vocab = len(tokens)
    types = [1] * 256 + [3, 3, 3] + [1, 1, 1]

    w = gguf.GGUFWriter(str(path), cfg.arch)
    a = cfg.arch
    w.add_block_count(cfg.n_layer)
    w.add_embedding_length(cfg.n_embd)
    w.add_feed_forward_length(cfg.n_ff)
    w.add_head_count(cfg.n_head)
    w.add_head_count_kv(cfg.n_head_kv)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_context_length(cfg.n_ctx_train)
    w.add_layer_norm_rms_eps(cfg.eps)
    w.add_rope_freq_base(cfg.rope_base)
    w.add_rope_dimension_count(cfg.head_dim)
    if cfg.n_expert:
        write_moe_keys(w, cfg)
    if cfg.rope_scaling is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType(cfg.rope_scaling))
    if cfg.rope_factor:
        w.add_rope_scaling_factor(cfg.rope_factor)
    if cfg.rope_orig_ctx:
        w.add_rope_scaling_orig_ctx_len(cfg.rope_orig_ctx)
    if cfg.rope_attn_factor is not None:
        w.add_rope_scaling_attn_factors(cfg.rope_attn_factor)
    if a in ("gemma3", "phi3", "gpt-oss"):  # phi3: written, but llama.cpp disables Phi's sliding window
        w.add_sliding_window(cfg.sliding_window)
    if a == "granite":
        w.add_embedding_scale(GRANITE_SCALES["embedding"])
        w.add_residual_scale(GRANITE_SCALES["residual"])
        w.add_attention_scale(GRANITE_SCALES["attention"])
        w.add_logit_scale(GRANITE_SCALES["logit"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(cfg.tokenizer_pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(257)
    w.add_eos_token_id(258)
    w.add_add_bos_token(False)
    if cfg.chat_template is not None:
        w.add_chat_template(cfg.chat_template)
    return w, n_vocab


def tensor_adder(w: gguf.GGUFWriter, cfg, weights: dict[str, np.ndarray]):
    """add(name, array, type): quantizes with the gguf package, writes, and records the float64
    dequantized values in `weights` (names in cfg.drop_tensors are skipped)."""

    def add(name: str, arr: np.ndarray, qtype: Q) -> None:
        arr = arr.astype(np.float32)
        if name in cfg.drop_tensors:
            return
        if qtype == Q.F32:
            data = arr
        else:
            data = gguf.quants.quantize(arr, qtype)
        w.add_tensor(name, data, raw_dtype=None if qtype == Q.F32 else qtype)
        weights[name] = (
            arr.astype(np.float64) if qtype == Q.F32 else gguf.quants.dequantize(data, qtype).astype(np.float64)
        )

    return add


def finish_writer(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
