"""A tiny synthetic "thinking" model: a qwen3-architecture GGUF with the real Qwen3 chat template
(tests/data/templates/qwen3-0.6b.jinja, llama.cpp's copy of Qwen/Qwen3-0.6B's) whose greedy output
is scripted.

How the weights script the output: every layer's attention and FFN output projections are zero,
so the residual stream stays the current token's embedding and the next token depends only on
the current one. Script tokens get orthogonal one-hot embeddings (exact under the runtime's int8
activation quantization) and the untied output.weight maps token k's direction to token k+1's
logit. Every other token shares one direction that leads to <|im_end|> (end of generation).

Scripts, by the last prompt token:
  "\\n"   (generation prompt with thinking on):  "<th" "ink>" (the open marker split across two
          tokens) "Hmm" "," " think" "ing" "</think>" "\\n\\n" "The" " answer" " is" " 42" "."
  "\\n\\n" (thinking off: the template closed an empty block):  "The" " answer" " is" " 42" "."
"""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

TEMPLATE_PATH = Path(__file__).resolve().parents[1] / "data" / "templates" / "qwen3-0.6b.jinja"
REASONING = "Hmm, thinking"
CONTENT = "The answer is 42."
SPECIALS = [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<think>", 4), ("</think>", 4)]
PIECES = ["<th", "ink>", "Hmm", "Ġthink", "ing", "ĊĊ", "The", "Ġanswer", "Ġis", "Ġ42"]
# "Ċ" opens the thinking script; "ĊĊ" (after the template's empty block) joins it for the content.
SCRIPT = ["Ċ", "<th", "ink>", "Hmm", ",", "Ġthink", "ing", "</think>", "ĊĊ", "The", "Ġanswer", "Ġis", "Ġ42", ".",
          "<|im_end|>"]


def _byte_vocab() -> list[str]:
    """GPT-2 byte-level alphabet (as tests/csrc/model/tiny_gguf.py): 256 tokens in byte order."""
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    out, extra = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(0x100 + extra))
            extra += 1
    return out


def write_thinking_gguf(path: Path, n_embd: int = 32) -> Path:
    return write_scripted_gguf(path, TEMPLATE_PATH.read_text(), SPECIALS, PIECES, SCRIPT, eos="<|im_end|>",
                               bos="<|endoftext|>", merges=["Ċ Ċ"], n_embd=n_embd)


def write_scripted_gguf(path: Path, template: str, specials: list[tuple[str, int]], pieces: list[str],
                        script: list[str], *, eos: str, bos: str, merges: list[str], n_embd: int = 32,
                        arch: str = "qwen3") -> Path:
    """A qwen3 (or gpt-oss) architecture GGUF whose greedy output follows `script` (token texts, the
    first one the last prompt token's). The n-th time a text appears in the script it is the n-th vocabulary token
    with that text, so a script may repeat a token by listing it that often in specials / pieces."""
    tokens = _byte_vocab() + [t for t, _ in specials] + pieces
    types = [1] * 256 + [k for _, k in specials] + [1] * len(pieces)
    copies: dict[str, list[int]] = {}
    for i, t in enumerate(tokens):
        copies.setdefault(t, []).append(i)
    script_ids = []
    for k, t in enumerate(script):
        nth = script[:k].count(t)
        assert nth < len(copies[t]), f"script token {t!r} appears more often than the vocabulary has it"
        script_ids.append(copies[t][nth])
    n_vocab, E = len(tokens), n_embd
    assert len(script) < E, "one direction per script token plus the shared one"

    embd = np.zeros((n_vocab, E), np.float32)
    head = np.zeros((n_vocab, E), np.float32)
    other = E - 1  # the direction of every token outside the script
    embd[:, other] = 1.0
    eos_id = copies[eos][-1]
    head[eos_id, other] = 1.0
    for k, token in enumerate(script_ids[:-1]):
        embd[token] = 0.0
        embd[token, k] = 1.0
        head[script_ids[k + 1], k] = 1.0

    w = gguf.GGUFWriter(str(path), arch)
    n_head, head_dim, n_ff = 2, 16, 32
    w.add_block_count(1)
    w.add_embedding_length(E)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(1)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_context_length(1024)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    w.add_rope_dimension_count(head_dim)
    if arch == "gpt-oss":
        w.add_expert_count(2)
        w.add_expert_used_count(1)
        w.add_expert_feed_forward_length(n_ff)
        w.add_sliding_window(4)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o" if arch == "gpt-oss" else "qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(eos_id)
    w.add_bos_token_id(copies[bos][-1])
    w.add_add_bos_token(False)
    w.add_chat_template(template)

    def add(name: str, arr) -> None:
        w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))

    add("token_embd.weight", embd)
    add("output.weight", head)
    add("output_norm.weight", np.ones(E))
    p = "blk.0."
    qd = n_head * head_dim
    add(p + "attn_norm.weight", np.ones(E))
    add(p + "attn_q.weight", np.zeros((qd, E)))
    add(p + "attn_k.weight", np.zeros((head_dim, E)))
    add(p + "attn_v.weight", np.zeros((head_dim, E)))
    add(p + "attn_output.weight", np.zeros((E, qd)))
    if arch == "gpt-oss":  # zero attention output and expert down projections (and biases) too
        for name, rows in (("attn_q", qd), ("attn_k", head_dim), ("attn_v", head_dim), ("attn_output", E)):
            add(p + name + ".bias", np.zeros(rows))
        add(p + "attn_sinks.weight", np.zeros(n_head))
        add(p + "post_attention_norm.weight", np.ones(E))
        add(p + "ffn_gate_inp.weight", np.zeros((2, E)))
        add(p + "ffn_gate_inp.bias", np.array([1.0, 0.0]))
        for name, shape in (("gate", (2, n_ff, E)), ("up", (2, n_ff, E)), ("down", (2, E, n_ff))):
            add(p + f"ffn_{name}_exps.weight", np.zeros(shape))
            add(p + f"ffn_{name}_exps.bias", np.zeros(shape[:2]))
    else:
        add(p + "ffn_norm.weight", np.ones(E))
        add(p + "attn_q_norm.weight", np.ones(head_dim))
        add(p + "attn_k_norm.weight", np.ones(head_dim))
        add(p + "ffn_gate.weight", np.zeros((n_ff, E)))
        add(p + "ffn_up.weight", np.zeros((n_ff, E)))
        add(p + "ffn_down.weight", np.zeros((E, n_ff)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
