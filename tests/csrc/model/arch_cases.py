"""Tiny random-weight GGUFs of the architectures checked against llama.cpp (tests/data/arch): the
test regenerates each file (deterministic; its sha256 is in the reference) and compares with the
llama.cpp outputs make_reference.py stored. The cases of LLAMA_QUANTIZED are written in F32 and
quantized by llama.cpp's own quantizer (the gguf package has no K-quant quantizer); those files are
kept in tests/data/arch, since the tests cannot run llama.cpp."""
from __future__ import annotations

import hashlib
from pathlib import Path

from tiny_gguf import Q, TinyConfig

# Written for these tests in the Granite 3.x turn format (<|start_of_role|>…<|end_of_role|>…<|end_of_text|>),
# which llama.cpp recognises by its role markers and renders with its built-in granite formatter.
GRANITE_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_of_role|>assistant<|end_of_role|>' -}}{%- endif -%}"
)
# Written for these tests in the Phi-3 turn format (<|role|>\n…<|end|>\n), llama.cpp's built-in "phi3".
PHI3_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}"
)

# Mixture of experts: 8 experts, 2 per token (seeds chosen for router logit gaps ≥ 0.06 between the 2nd
# and 3rd expert, so no routing is a near-tie, and for decisive greedy steps); qwen3moe's experts are
# expert_feed_forward_length (32) wide, llama's (Mixtral) feed_forward_length. Widths multiple of 16:
# the experts run repacked.
QWEN3MOE = {"arch": "qwen3moe", "n_expert": 8, "n_expert_used": 2, "n_ff_exp": 32, "eps": 1e-6,
            "tokenizer_pre": "smollm", "tied": False, "output_std": 1.5}
MIXTRAL = {"arch": "llama", "n_expert": 8, "n_expert_used": 2, "n_ff": 64, "tokenizer_pre": "smollm", "tied": False,
           "output_std": 1.5}
# K-quant experts need 256-wide rows: llama.cpp's Q4_K_M gives Q4_K gate/up and Q6_K down experts.
QWEN3MOE_256 = dict(QWEN3MOE, n_expert=4, n_embd=256, head_dim=64, n_ff_exp=256, weight_type=Q.F32,
                    embd_type=Q.F32)

# gpt-oss: 4 experts, 2 per token, 32 wide; a 4-position window on layer 0 (full attention on layer 1) and
# YaRN (factor 4 over a 64-position original context), so the window, the sinks and the ramp all matter in
# the 24-token prompt. MXFP4 experts written by the gguf package: make_reference.py checks that llama.cpp's
# llama-quantize MXFP4_MOE (how released gpt-oss files are made) turns gpt-oss-f32 into the very same tensors.
# Its chat template is gpt-oss's own (llama.cpp's models/templates/openai-gpt-oss-120b.jinja).
GPTOSS = {"arch": "gpt-oss", "n_expert": 4, "n_expert_used": 2, "n_ff_exp": 32, "sliding_window": 4,
          "rope_scaling": "yarn", "rope_factor": 4.0, "rope_orig_ctx": 64, "tokenizer_pre": "gpt-4o", "tied": False,
          "output_std": 1.5}
GPTOSS_TEMPLATE = (Path(__file__).resolve().parents[2] / "data" / "arch" / "gpt-oss.jinja").read_text("utf-8")

# ChatML as Qwen3 files carry it (without the tool and thinking branches), llama.cpp's built-in "chatml".
CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)

CASES = {
    "granite-q8_0": (TinyConfig(arch="granite", weight_type=Q.Q8_0, tokenizer_pre="smollm",
                                chat_template=GRANITE_TEMPLATE), 31),
    "smollm3-q4_0": (TinyConfig(arch="smollm3", n_layer=4, weight_type=Q.Q4_0, tokenizer_pre="smollm"), 119),
    "phi3-q5_0": (TinyConfig(arch="phi3", weight_type=Q.Q5_0, tokenizer_pre="smollm", tied=False,
                             output_std=0.8, chat_template=PHI3_TEMPLATE), 119),
    "olmo2-q8_0": (TinyConfig(arch="olmo2", weight_type=Q.Q8_0, tokenizer_pre="smollm", eps=1e-6, tied=False,
                              output_std=0.8), 102),
    "qwen3moe-f16": (TinyConfig(**QWEN3MOE, weight_type=Q.F16, embd_type=Q.F16), 21),
    "qwen3moe-q8_0": (TinyConfig(**QWEN3MOE, weight_type=Q.Q8_0, chat_template=CHATML_TEMPLATE), 21),
    "qwen3moe-q4_k_m": (TinyConfig(**QWEN3MOE_256), 17),
    "mixtral-f32": (TinyConfig(**MIXTRAL, weight_type=Q.F32, embd_type=Q.F32), 53),
    "mixtral-q8_0": (TinyConfig(**MIXTRAL, weight_type=Q.Q8_0), 57),
    "gpt-oss-f32": (TinyConfig(**GPTOSS, weight_type=Q.F32, embd_type=Q.F32), 3),
    "gpt-oss-mxfp4": (TinyConfig(**GPTOSS, weight_type=Q.Q8_0, expert_type=Q.MXFP4, chat_template=GPTOSS_TEMPLATE), 3),
}
# Cases whose chat template llama.cpp renders with its Jinja engine rather than llama_chat_apply_template's
# built-in formats (gpt-oss's real template; make_reference.py renders it with llama-cpp-python's
# Jinja2ChatFormatter, whose strftime_now gives the day's date: the test puts its own date in).
JINJA_RENDERED = {"gpt-oss-mxfp4"}
# name -> (case, llama.cpp file type): llama.cpp's quantizer makes this case's tensors from the other case's F32 file.
SAME_AS_LLAMA_QUANTIZED = {"gpt-oss-mxfp4": ("gpt-oss-f32", "LLAMA_FTYPE_MOSTLY_MXFP4_MOE")}
# name -> llama.cpp file type (llama_cpp.LLAMA_FTYPE_MOSTLY_*) its F32 file is quantized to
LLAMA_QUANTIZED = {"qwen3moe-q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}
IDS = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 10, 84, 104, 101, 32, 113, 117,
       105, 99, 107, 32]
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi."},
    {"role": "user", "content": "What is 2+2?"},
]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
