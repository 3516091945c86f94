"""Tiny random-weight GGUFs of the architectures checked against llama.cpp (tests/data/arch): the
test regenerates each file (deterministic; its sha256 is in the reference) and compares with the
llama.cpp outputs make_reference.py stored."""
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

CASES = {
    "granite-q8_0": (TinyConfig(arch="granite", weight_type=Q.Q8_0, tokenizer_pre="smollm",
                                chat_template=GRANITE_TEMPLATE), 31),
    "smollm3-q4_0": (TinyConfig(arch="smollm3", n_layer=4, weight_type=Q.Q4_0, tokenizer_pre="smollm"), 119),
    "phi3-q5_0": (TinyConfig(arch="phi3", weight_type=Q.Q5_0, tokenizer_pre="smollm", tied=False,
                             output_std=0.8, chat_template=PHI3_TEMPLATE), 119),
    "olmo2-q8_0": (TinyConfig(arch="olmo2", weight_type=Q.Q8_0, tokenizer_pre="smollm", eps=1e-6, tied=False,
                              output_std=0.8), 102),
}
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
