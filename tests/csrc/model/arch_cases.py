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

CASES = {
    "granite-q8_0": (TinyConfig(arch="granite", weight_type=Q.Q8_0, tokenizer_pre="smollm",
                                chat_template=GRANITE_TEMPLATE), 31),
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
