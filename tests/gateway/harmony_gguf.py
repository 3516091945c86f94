"""A tiny synthetic gpt-oss model: the gpt-oss architecture with thinking_gguf.py's scripted weights
(zero attention and expert outputs, so the next token depends on the current one only), the real
gpt-oss chat template (tests/data/arch/gpt-oss.jinja) and harmony's control tokens.

The generation prompt ends "<|start|>assistant", whose last token is the byte "t"; from there the
model writes "<|channel|>" "analysis" "<|message|>" "User" " asks" " 6" "*" "7" "<|end|>" "<|start|>"
"assistant" "<|channel|>" "final" "<|message|>" "It" " is" " 42" "." "<|return|>" (end of generation;
<|end|> is none for gpt-oss). The repeated header tokens are second vocabulary copies of the same text.
"""
from __future__ import annotations

from pathlib import Path

from .thinking_gguf import write_scripted_gguf

TEMPLATE_PATH = Path(__file__).resolve().parents[1] / "data" / "arch" / "gpt-oss.jinja"
REASONING = "User asks 6*7"
CONTENT = "It is 42."
CONTROL = ["<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>",
           "<|constrain|>", "<|return|>", "<|call|>", "<|channel|>", "<|message|>"]
SPECIALS = [(t, 3) for t in CONTROL]
PIECES = ["analysis", "final", "assistant", "User", "Ġasks", "Ġ6", "It", "Ġis", "Ġ42"]
SCRIPT = ["t", "<|channel|>", "analysis", "<|message|>", "User", "Ġasks", "Ġ6", "*", "7", "<|end|>", "<|start|>",
          "assistant", "<|channel|>", "final", "<|message|>", "It", "Ġis", "Ġ42", ".", "<|return|>"]


def write_harmony_gguf(path: Path) -> Path:
    return write_scripted_gguf(path, TEMPLATE_PATH.read_text(), SPECIALS, PIECES, SCRIPT, eos="<|return|>",
                               bos="<|startoftext|>", merges=["Ġ 6"], arch="gpt-oss")
