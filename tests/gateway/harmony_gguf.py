"""A tiny synthetic gpt-oss model: the gpt-oss architecture with thinking_gguf.py's scripted weights
(zero attention and expert outputs, so the next token depends on the current one only), the real
gpt-oss chat template (tests/data/arch/gpt-oss.jinja) and harmony's control tokens.

The generation prompt ends "<|start|>assistant", whose last token is the byte "t"; from there the
model writes "<|channel|>" "analysis" "<|message|>" "User" " asks" " 6" "*" "7" "<|end|>" "<|start|>"
"assistant" "<|channel|>" "final" "<|message|>" "It" " is" " 42" "." "<|return|>" (end of generation;
<|end|> is none for gpt-oss). The repeated header tokens are second vocabulary copies of the same text.

write_harmony_tools_gguf: the same model answering with tool calls (TOOLS_SCRIPT): an analysis
message, a commentary preamble without recipient, a call with its recipient in the role
("<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>…<|end|>"), and
one with it in the channel header ("<|channel|>commentary to=functions.get_time <|constrain|>json
<|message|>…<|call|>", <|call|> ending the generation).
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

TOOLS_REASONING = "Need weather"
TOOLS_CONTENT = "Checking."
CALLS = [("get_weather", '{"city":"Paris"}'), ("get_time", '{"tz":"CET"}')]
# <|end|> is user-defined text (4) in every copy, as the runtime's tokenizer makes gpt-oss's one <|end|>
# (llguidance then sees it as text, as with the real model).
TOOLS_SPECIALS = [(t, 4 if t == "<|end|>" else k) for t, k in
                  SPECIALS + [(t, 3) for t in ("<|channel|>", "<|message|>", "<|start|>", "<|end|>") * 2]]
TOOLS_PIECES = ["analysis", "commentary", "commentary", "commentary", "assistant", "assistant", "assistant", "Need", "Ġweather", "Checking",
                "Ġto=functions.get_weather", "Ġjson", CALLS[0][1], "Ġto=functions.get_time", "json", CALLS[1][1]]
TOOLS_SCRIPT = ["t", "<|channel|>", "analysis", "<|message|>", "Need", "Ġweather", "<|end|>",
                "<|start|>", "assistant", "<|channel|>", "commentary", "<|message|>", "Checking", ".", "<|end|>",
                "<|start|>", "assistant", "Ġto=functions.get_weather", "<|channel|>", "commentary", "Ġjson",
                "<|message|>", CALLS[0][1], "<|end|>",
                "<|start|>", "assistant", "<|channel|>", "commentary", "Ġto=functions.get_time", "Ġ", "<|constrain|>", "json",
                "<|message|>", CALLS[1][1], "<|call|>"]


def write_harmony_gguf(path: Path) -> Path:
    return write_scripted_gguf(path, TEMPLATE_PATH.read_text(), SPECIALS, PIECES, SCRIPT, eos="<|return|>",
                               bos="<|startoftext|>", merges=["Ġ 6"], arch="gpt-oss")


def write_harmony_tools_gguf(path: Path) -> Path:
    return write_scripted_gguf(path, TEMPLATE_PATH.read_text(), TOOLS_SPECIALS, TOOLS_PIECES, TOOLS_SCRIPT,
                               eos="<|return|>", bos="<|startoftext|>", merges=["Ġ 6"], arch="gpt-oss", n_embd=48)
